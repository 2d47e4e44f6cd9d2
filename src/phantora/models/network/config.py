"""Typed configuration of the simulated cluster's network, with per-GPU-family defaults.

Three ways in, one validated result (`ClusterNetworkConfig`):
- `cluster_from_flags(gpu="h100", nodes=4, gpus_per_node=8)`: the `--gpu/--nodes/--gpus-per-node` style,
  every other value from the family defaults below;
- `cluster_from_toml(path)` / `cluster_from_toml_dict(d)`: a cluster file (schema in docs/network-model.md);
- direct construction of the dataclasses (tests).

Units inside are bytes, bytes/s and integer nanoseconds. Values enter in the units people quote
(GB/s for NVLink, Gb/s for NICs, µs for latencies) only in the TOML/flags layer, converted once here.

Note: [Sources]
Every default cites where it comes from. Where no measurement or datasheet backs a number, the
source says "assumption" and why; those are the numbers to measure first.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping

Algorithm = Literal["ring", "tree"]
Protocol = Literal["LL", "LL128", "Simple"]
FabricKind = Literal["single_switch", "leaf_spine"]

ALGORITHMS: tuple[Algorithm, ...] = ("ring", "tree")
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")

_GB = 1e9
_GBIT = 1e9 / 8
_US_TO_NS = 1000


def _us(value: float) -> int:
    return int(round(value * _US_TO_NS))


@dataclass(frozen=True, kw_only=True, slots=True)
class PerProtocol:
    """One number per NCCL protocol."""

    ll: float
    ll128: float
    simple: float

    def get(self, protocol: Protocol) -> float:
        if protocol == "LL":
            return self.ll
        if protocol == "LL128":
            return self.ll128
        if protocol == "Simple":
            return self.simple
        raise ValueError(f"unknown NCCL protocol {protocol!r}; choose one of {PROTOCOLS}")


@dataclass(frozen=True, kw_only=True, slots=True)
class NvlinkConfig:
    """The NVLink/NVSwitch domain of one node: every GPU has one port into a non-blocking switch."""

    bandwidth_bytes_per_s: float
    """Per GPU, per direction (what one GPU can send while also receiving as much)."""
    latency_ns: int = 0
    """Extra one-way latency per NVLink hop, added to NCCL's per-step latency (which already includes NVLink)."""

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise ValueError(f"nvlink bandwidth must be a positive number, got {self.bandwidth_bytes_per_s}")
        if self.latency_ns < 0:
            raise ValueError(f"nvlink latency must be >= 0, got {self.latency_ns} ns")


@dataclass(frozen=True, kw_only=True, slots=True)
class NicConfig:
    """Network interfaces of one node (GPUDirect RDMA: the NIC is assumed to reach GPU memory at line rate)."""

    nics_per_node: int
    """NICs per node; GPU g of a node uses NIC g * nics_per_node // gpus_per_node (one per GPU = rails)."""
    bandwidth_bytes_per_s: float
    """Per NIC, per direction."""
    latency_ns: int = 0
    """Extra one-way latency per NIC traversal, added to NCCL's network step latency (which already includes a NIC pair)."""

    def __post_init__(self) -> None:
        if self.nics_per_node < 0:
            raise ValueError(f"nics_per_node must be >= 0, got {self.nics_per_node}")
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise ValueError(f"nic bandwidth must be a positive number, got {self.bandwidth_bytes_per_s}")
        if self.latency_ns < 0:
            raise ValueError(f"nic latency must be >= 0, got {self.latency_ns} ns")


@dataclass(frozen=True, kw_only=True, slots=True)
class FabricConfig:
    """The switch fabric between nodes: one switch, or a two-tier leaf/spine (2-level fat tree)."""

    kind: FabricKind = "leaf_spine"
    nodes_per_leaf: int = 16
    """Nodes under one leaf (per rail when rail_optimized)."""
    spines: int = 8
    """Spine switches; every leaf has one uplink bundle to each spine."""
    oversubscription: float = 1.0
    """Leaf downlink bandwidth / leaf uplink bandwidth (1 = non-blocking, 2 = half the bisection)."""
    rail_optimized: bool = True
    """NIC k of every node under a leaf group goes to that group's leaf k (DGX SuperPOD style)."""
    switch_latency_ns: int = 0
    """Extra latency per switch traversed, added to NCCL's network step latency."""

    def __post_init__(self) -> None:
        if self.kind not in ("single_switch", "leaf_spine"):
            raise ValueError(f"fabric kind must be 'single_switch' or 'leaf_spine', got {self.kind!r}")
        if self.nodes_per_leaf < 1:
            raise ValueError(f"fabric nodes_per_leaf must be >= 1, got {self.nodes_per_leaf}")
        if self.spines < 1:
            raise ValueError(f"fabric spines must be >= 1, got {self.spines}")
        if not (self.oversubscription > 0 and math.isfinite(self.oversubscription)):
            raise ValueError(f"fabric oversubscription must be a positive number, got {self.oversubscription}")
        if self.switch_latency_ns < 0:
            raise ValueError(f"fabric switch latency must be >= 0, got {self.switch_latency_ns} ns")


@dataclass(frozen=True, kw_only=True, slots=True)
class NcclTuning:
    """NCCL cost-model constants: the structure follows NCCL's src/graph/tuning.cc (latency = base +
    steps x per-step latency; bandwidth = link bandwidth x protocol factor), the Simple-protocol values and
    the launch overhead are fitted to H200 measurements by benchmarks/collectives/fit.py."""

    algorithms: tuple[Algorithm, ...] = ALGORITHMS
    """Algorithms NCCL may pick (like NCCL_ALGO). Tree is only used for multi-node all_reduce."""
    protocols: tuple[Protocol, ...] = PROTOCOLS
    """Protocols NCCL may pick (like NCCL_PROTO)."""
    launch_overhead_ns: int
    """Fixed cost of every collective/p2p (kernel launch, proxy, first-chunk sync)."""
    ring_base_latency_ns: PerProtocol
    tree_base_latency_ns: PerProtocol
    nvlink_step_latency_ns: PerProtocol
    """Per ring step over NVLink."""
    net_step_latency_ns: PerProtocol
    """Per ring step over the network."""
    tree_nvlink_step_latency_ns: PerProtocol
    tree_net_step_latency_ns: PerProtocol
    protocol_bandwidth_factor: PerProtocol
    """Fraction of the Simple-protocol bandwidth each protocol reaches (LL: for all_reduce/reduce; see ll_bandwidth_factor_other)."""
    ll_bandwidth_factor_other: float
    """LL factor for single-node collectives other than all_reduce/reduce."""
    nvlink_efficiency: float
    """Fraction of NVLink bandwidth a Simple-protocol NCCL kernel reaches."""
    net_efficiency: float
    """Fraction of NIC/fabric bandwidth a Simple-protocol NCCL transfer reaches."""
    all_to_all_efficiency: float
    """Extra factor for all_to_all (grouped send/recv to every peer at once)."""
    tree_bandwidth_factor: float
    """Tree all_reduce bus bandwidth relative to the ring's over the same ranks (NCCL's tree busBw x 0.9)."""
    local_copy_bytes_per_s: float
    """Rate of the rank's own-chunk copy/reduce that ring all_reduce/all_gather/reduce_scatter kernels do serially (S/n bytes)."""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for a in self.algorithms:
            if a not in ALGORITHMS:
                raise ValueError(f"unknown NCCL algorithm {a!r}; choose from {ALGORITHMS}")
        for p in self.protocols:
            if p not in PROTOCOLS:
                raise ValueError(f"unknown NCCL protocol {p!r}; choose from {PROTOCOLS}")
        if "ring" not in self.algorithms:
            raise ValueError("the ring algorithm cannot be disabled: every collective has a ring form")
        if not self.protocols:
            raise ValueError("at least one NCCL protocol must be enabled")
        if self.launch_overhead_ns < 0:
            raise ValueError("launch_overhead_ns must be >= 0")
        for name in ("nvlink_efficiency", "net_efficiency", "all_to_all_efficiency", "ll_bandwidth_factor_other",
                     "tree_bandwidth_factor"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        for p in PROTOCOLS:
            if not 0 < self.protocol_bandwidth_factor.get(p) <= 1:
                raise ValueError(f"protocol_bandwidth_factor for {p} must be in (0, 1]")
        if not self.local_copy_bytes_per_s > 0:
            raise ValueError("local_copy_bytes_per_s must be > 0")


# Note: [NCCL tuning defaults]
# Base and per-step latencies (µs) are NCCL's own tables, src/graph/tuning.cc (NCCL 2.19-2.2x):
#   baseLat  Ring {LL 6.6, LL128 14.0, Simple 8.4}, Tree {6.8, 14.0, 8.4}
#   hwLat NVLINK Ring {.6, 1.9, 3.4}, Tree {.6, 1.25, 4.0}; NET Ring {2.7, 4.0, 14.0}, Tree {5.0, 8.5, 14.0}
# Protocol bandwidth factors are NCCL's model refinements in the same file: ring LL = busBw/4 for
# all_reduce/reduce and multi-node, /3 otherwise; LL128 = 0.92 (120 of every 128 bytes are payload);
# tree busBw = 0.9 x the ring's.
# The fitted values (launch overhead 31 µs, Simple's extra latency 39 µs folded into its base, NVLink
# step latency x1.1, NVLink efficiency 0.87 = 392 GB/s, LL128 factor 0.92, all_to_all efficiency 0.86,
# local copy 700 GB/s) come from benchmarks/collectives/fit.py on data/h200/collectives/nccl/nccl_{2,4}.jsonl
# (H200 SXM, NCCL 2.28.9, NVLS off); rerun it to refresh them.
H200_NCCL_TUNING = NcclTuning(
    launch_overhead_ns=_us(31.0),
    ring_base_latency_ns=PerProtocol(ll=_us(6.6), ll128=_us(14.0), simple=_us(8.4 + 39.0)),
    tree_base_latency_ns=PerProtocol(ll=_us(6.8), ll128=_us(14.0), simple=_us(8.4 + 39.0)),
    nvlink_step_latency_ns=PerProtocol(ll=_us(0.6 * 1.1), ll128=_us(1.9 * 1.1), simple=_us(3.4 * 1.1)),
    net_step_latency_ns=PerProtocol(ll=_us(2.7), ll128=_us(4.0), simple=_us(14.0)),
    tree_nvlink_step_latency_ns=PerProtocol(ll=_us(0.6), ll128=_us(1.25), simple=_us(4.0)),
    tree_net_step_latency_ns=PerProtocol(ll=_us(5.0), ll128=_us(8.5), simple=_us(14.0)),
    protocol_bandwidth_factor=PerProtocol(ll=0.25, ll128=0.92, simple=1.0),
    ll_bandwidth_factor_other=1.0 / 3.0,
    nvlink_efficiency=0.87,
    net_efficiency=0.92,
    all_to_all_efficiency=0.86,
    tree_bandwidth_factor=0.9,
    local_copy_bytes_per_s=700e9,
    sources={
        "latency tables": "NCCL src/graph/tuning.cc baseLat/hwLat (2.19-2.2x); see Note: [NCCL tuning defaults]",
        "launch_overhead_ns, simple base, nvlink step x1.1, nvlink_efficiency, ll128, all_to_all_efficiency, local_copy":
            "fitted: benchmarks/collectives/fit.py on data/h200/collectives/nccl/nccl_{2,4}.jsonl (H200, NCCL 2.28.9)",
        "net_efficiency": "assumption, uncalibrated (no multi-node measurement yet): NCCL reaches ~90+% of "
            "IB line rate in nccl-tests; taken as 0.92 like NCCL's LL128 payload ratio",
    },
)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuFamilyDefaults:
    """Network defaults for one GPU family, each value with its source."""

    key: str
    gpus_per_node: int
    nvlink_bandwidth_bytes_per_s: float
    nvlink_source: str
    nic_bandwidth_bytes_per_s: float
    nic_source: str
    nccl: NcclTuning
    nccl_source: str


GPU_FAMILY_DEFAULTS: dict[str, GpuFamilyDefaults] = {
    "a100": GpuFamilyDefaults(
        key="a100",
        gpus_per_node=8,
        nvlink_bandwidth_bytes_per_s=300 * _GB,
        nvlink_source="NVIDIA A100 datasheet: NVLink 3, 600 GB/s total per GPU = 300 GB/s per direction",
        nic_bandwidth_bytes_per_s=200 * _GBIT,
        nic_source="NVIDIA DGX A100 user guide: 8x ConnectX-6 200 Gb/s HDR InfiniBand, one per GPU",
        nccl=H200_NCCL_TUNING,
        nccl_source="uncalibrated for A100: H200 fit reused (same NCCL model structure)",
    ),
    "h100": GpuFamilyDefaults(
        key="h100",
        gpus_per_node=8,
        nvlink_bandwidth_bytes_per_s=450 * _GB,
        nvlink_source="NVIDIA H100 SXM datasheet: NVLink 4, 900 GB/s total per GPU = 450 GB/s per direction",
        nic_bandwidth_bytes_per_s=400 * _GBIT,
        nic_source="NVIDIA DGX H100 user guide: 8x ConnectX-7 400 Gb/s NDR InfiniBand, one per GPU",
        nccl=H200_NCCL_TUNING,
        nccl_source="H200 fit reused: same NVLink 4 / NVSwitch generation and sm_90 NCCL kernels",
    ),
    "h200": GpuFamilyDefaults(
        key="h200",
        gpus_per_node=8,
        nvlink_bandwidth_bytes_per_s=450 * _GB,
        nvlink_source="NVIDIA H200 datasheet: NVLink 900 GB/s total per GPU = 450 GB/s per direction",
        nic_bandwidth_bytes_per_s=400 * _GBIT,
        nic_source="NVIDIA DGX H200 user guide: 8x ConnectX-7 400 Gb/s NDR InfiniBand, one per GPU",
        nccl=H200_NCCL_TUNING,
        nccl_source="fitted on 2 and 4 H200 SXM (data/h200/collectives/nccl/nccl_{2,4}.jsonl)",
    ),
    "b200": GpuFamilyDefaults(
        key="b200",
        gpus_per_node=8,
        nvlink_bandwidth_bytes_per_s=900 * _GB,
        nvlink_source="NVIDIA DGX B200 datasheet: NVLink 5, 1.8 TB/s total per GPU = 900 GB/s per direction",
        nic_bandwidth_bytes_per_s=400 * _GBIT,
        nic_source="NVIDIA DGX B200 datasheet: 8x ConnectX-7 400 Gb/s, one per GPU",
        nccl=H200_NCCL_TUNING,
        nccl_source="uncalibrated for B200: H200 fit reused",
    ),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterNetworkConfig:
    """Everything the network model needs to know about the cluster."""

    gpu: str
    """GPU family key (a100, h100, h200, b200): selects defaults."""
    nodes: int
    gpus_per_node: int
    nvlink: NvlinkConfig
    nic: NicConfig
    fabric: FabricConfig
    nccl: NcclTuning

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if self.nodes > 1 and self.nic.nics_per_node < 1:
            raise ValueError(f"a {self.nodes}-node cluster needs nics_per_node >= 1")
        if self.nic.nics_per_node > self.gpus_per_node:
            raise ValueError(
                f"nics_per_node ({self.nic.nics_per_node}) cannot exceed gpus_per_node ({self.gpus_per_node})")
        if self.nic.nics_per_node and self.gpus_per_node % self.nic.nics_per_node:
            raise ValueError(
                f"gpus_per_node ({self.gpus_per_node}) must be a multiple of nics_per_node ({self.nic.nics_per_node})")

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def _family(gpu: str) -> GpuFamilyDefaults:
    key = gpu.lower()
    if key not in GPU_FAMILY_DEFAULTS:
        raise ValueError(f"unknown GPU {gpu!r}: known GPUs are {', '.join(sorted(GPU_FAMILY_DEFAULTS))}")
    return GPU_FAMILY_DEFAULTS[key]


def cluster_from_flags(*, gpu: str, nodes: int = 1, gpus_per_node: int | None = None) -> ClusterNetworkConfig:
    """The `--gpu h100 --nodes 4 --gpus-per-node 8` form: everything else from the GPU family defaults."""
    fam = _family(gpu)
    gpn = fam.gpus_per_node if gpus_per_node is None else gpus_per_node
    nics = min(gpn, fam.gpus_per_node)
    while nics > 1 and gpn % nics:
        nics -= 1
    return ClusterNetworkConfig(
        gpu=fam.key,
        nodes=nodes,
        gpus_per_node=gpn,
        nvlink=NvlinkConfig(bandwidth_bytes_per_s=fam.nvlink_bandwidth_bytes_per_s),
        nic=NicConfig(nics_per_node=nics, bandwidth_bytes_per_s=fam.nic_bandwidth_bytes_per_s),
        fabric=FabricConfig(),
        nccl=fam.nccl,
    )


# TOML schema: table -> {toml key: (dataclass field, converter)}.
_TOML_TABLES: dict[str, dict[str, tuple[str, Any]]] = {
    "nvlink": {
        "bandwidth_gbytes_per_s": ("bandwidth_bytes_per_s", lambda v: float(v) * _GB),
        "latency_us": ("latency_ns", _us),
    },
    "nic": {
        "nics_per_node": ("nics_per_node", int),
        "bandwidth_gbits_per_s": ("bandwidth_bytes_per_s", lambda v: float(v) * _GBIT),
        "latency_us": ("latency_ns", _us),
    },
    "fabric": {
        "kind": ("kind", str),
        "nodes_per_leaf": ("nodes_per_leaf", int),
        "spines": ("spines", int),
        "oversubscription": ("oversubscription", float),
        "rail_optimized": ("rail_optimized", bool),
        "switch_latency_us": ("switch_latency_ns", _us),
    },
    "nccl": {
        "algorithms": ("algorithms", tuple),
        "protocols": ("protocols", tuple),
    },
}


_TOML_TOP_KEYS = ("gpu", "nodes", "gpus_per_node")


def cluster_from_toml_dict(data: Mapping[str, Any], *, where: str = "cluster file") -> ClusterNetworkConfig:
    """Build the config from a parsed cluster TOML. Every key must be known: a misspelled one
    (`nic_gbps` for `bandwidth_gbits_per_s`) would describe a cluster the user did not mean."""
    unknown = sorted(set(data) - set(_TOML_TOP_KEYS) - set(_TOML_TABLES))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(_TOML_TOP_KEYS)} and the tables "
                         f"{', '.join(f'[{t}]' for t in _TOML_TABLES)}")
    if "gpu" not in data:
        raise ValueError(f"{where}: missing required key 'gpu'")
    base = cluster_from_flags(
        gpu=str(data["gpu"]), nodes=int(data.get("nodes", 1)),
        gpus_per_node=None if "gpus_per_node" not in data else int(data["gpus_per_node"]))
    parts: dict[str, Any] = {"nvlink": base.nvlink, "nic": base.nic, "fabric": base.fabric, "nccl": base.nccl}
    for table, schema in _TOML_TABLES.items():
        raw = data.get(table)
        if raw is None:
            continue
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: [{table}] must be a table")
        unknown = sorted(set(raw) - set(schema))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown} in [{table}]; allowed: {sorted(schema)}")
        updates = {}
        for key, value in raw.items():
            name, conv = schema[key]
            try:
                updates[name] = conv(value)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}: [{table}] {key} = {value!r}: {e}") from None
        try:
            parts[table] = replace(parts[table], **updates)
        except ValueError as e:
            raise ValueError(f"{where}: [{table}]: {e}") from None
    try:
        return replace(base, **parts)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def cluster_from_toml(path: str | Path) -> ClusterNetworkConfig:
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"cluster file {p} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"cluster file {p} is not valid TOML: {e}") from None
    return cluster_from_toml_dict(data, where=str(p))

