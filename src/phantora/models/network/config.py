"""Typed configuration of the simulated cluster's network.

One validated result (`ClusterNetworkConfig`), built from a GPU's node defaults (`NodeDefaults`) and NCCL
tuning by `cluster_for_node`; the `--gpu` flags and cluster files are read by `phantora.specs.cluster`,
which takes both from the GPU's profile (`phantora.specs`). Tests may build the dataclasses directly.

Units inside are bytes, bytes/s and integer nanoseconds. Values enter in the units people quote
(GB/s for NVLink, Gb/s for NICs, µs for latencies) only where files and flags are read.

Note: [Sources]
Every default cites where it comes from. Where no measurement or datasheet backs a number, the
source says "assumption" and why; those are the numbers to measure first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Mapping

from phantora.models.gpu import GpuVariant

Algorithm = Literal["ring", "tree"]
Protocol = Literal["LL", "LL128", "Simple"]
FabricKind = Literal["single_switch", "leaf_spine"]

ALGORITHMS: tuple[Algorithm, ...] = ("ring", "tree")
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")

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
    """NCCL cost-model constants. The structure follows NCCL's src/graph/tuning.cc (latency = base +
    steps x per-step latency; bandwidth = link bandwidth x protocol factor). The fields without a default are
    fitted per GPU (specs/<gpu>/nccl.json); the defaults are NCCL's own tables (Note: [NCCL tuning defaults])
    and the assumptions `NCCL_TABLE_SOURCES` names."""

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
    net_step_latency_ns: PerProtocol = PerProtocol(ll=_us(2.7), ll128=_us(4.0), simple=_us(14.0))
    """Per ring step over the network."""
    tree_nvlink_step_latency_ns: PerProtocol = PerProtocol(ll=_us(0.6), ll128=_us(1.25), simple=_us(4.0))
    tree_net_step_latency_ns: PerProtocol = PerProtocol(ll=_us(5.0), ll128=_us(8.5), simple=_us(14.0))
    protocol_bandwidth_factor: PerProtocol
    """Fraction of the Simple-protocol bandwidth each protocol reaches (LL: for all_reduce/reduce; see ll_bandwidth_factor_other)."""
    ll_bandwidth_factor_other: float = 1.0 / 3.0
    """LL factor for single-node collectives other than all_reduce/reduce."""
    nvlink_efficiency: float
    """Fraction of NVLink bandwidth a Simple-protocol NCCL kernel reaches."""
    net_efficiency: float = 0.92
    """Fraction of NIC/fabric bandwidth a Simple-protocol NCCL transfer reaches."""
    all_to_all_efficiency: float
    """Extra factor for all_to_all (grouped send/recv to every peer at once)."""
    tree_bandwidth_factor: float = 0.9
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
# tree busBw = 0.9 x the ring's. The fit (benchmarks/collectives/fit.py on data/<gpu>/collectives/nccl)
# starts from these tables and writes the launch overhead, the Simple protocol's extra base latency, the
# NVLink step latency, the NVLink, LL128 and all_to_all efficiencies and the local copy rate to
# specs/<gpu>/nccl.json; the other fields keep the defaults below.
NCCL_TABLE_SOURCES: Mapping[str, str] = {
    "net_step_latency_ns, tree_nvlink_step_latency_ns, tree_net_step_latency_ns, ll_bandwidth_factor_other, "
    "tree_bandwidth_factor": "NCCL src/graph/tuning.cc baseLat/hwLat (2.19-2.2x); see Note: [NCCL tuning defaults]",
    "net_efficiency": "assumption, uncalibrated (no multi-node measurement yet): NCCL reaches ~90+% of "
                      "IB line rate in nccl-tests; taken as 0.92 like NCCL's LL128 payload ratio",
}
"""Where the defaults of `NcclTuning` come from (the fitted fields' sources come with their file)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeDefaults:
    """One node of a GPU model as its DGX/HGX has it: what `--gpu` builds a cluster from."""

    gpus_per_node: int
    nvlink_bandwidth_bytes_per_s: float
    """Per GPU, per direction."""
    nic_bandwidth_bytes_per_s: float
    """Per NIC (one per GPU), per direction."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Where each number comes from."""

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if not (self.nvlink_bandwidth_bytes_per_s > 0 and self.nic_bandwidth_bytes_per_s > 0):
            raise ValueError("node bandwidths must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterNetworkConfig:
    """Everything the network model needs to know about the cluster."""

    gpu: str
    """The GPU model's key (`phantora.specs`), whose profile gave the defaults."""
    nodes: int
    gpus_per_node: int
    nvlink: NvlinkConfig
    nic: NicConfig
    fabric: FabricConfig
    nccl: NcclTuning
    gpu_variant: GpuVariant | None = None
    """The cluster file's `[variant]` of the GPU (models/gpu.py), applied to its profile by `specs.apply_variant`;
    the network model does not read it."""

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


def cluster_for_node(*, gpu: str, node: NodeDefaults, nccl: NcclTuning, nodes: int = 1,
                     gpus_per_node: int | None = None) -> ClusterNetworkConfig:
    """`nodes` nodes of `gpus_per_node` GPUs (default: the node's) with the node's NVLink and NICs, one NIC per
    GPU up to the node's count, and the default fabric."""
    gpn = node.gpus_per_node if gpus_per_node is None else gpus_per_node
    nics = min(gpn, node.gpus_per_node)
    while nics > 1 and gpn % nics:
        nics -= 1
    return ClusterNetworkConfig(
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpn,
        nvlink=NvlinkConfig(bandwidth_bytes_per_s=node.nvlink_bandwidth_bytes_per_s),
        nic=NicConfig(nics_per_node=nics, bandwidth_bytes_per_s=node.nic_bandwidth_bytes_per_s),
        fabric=FabricConfig(),
        nccl=nccl,
    )
