"""The cluster the simulation runs on, from `--gpu` flags or a cluster file, with the GPU profile's defaults.

Two ways in, one validated `ClusterNetworkConfig` (models/network/config.py):
- `cluster_from_flags(gpu="h100", nodes=4, gpus_per_node=8)`: the `--gpu/--nodes/--gpus-per-node` style, every
  other value from the GPU's profile (its node and NCCL tuning: specs/<gpu>/profile.toml, nccl.json);
- `cluster_from_toml(path)` / `cluster_from_toml_dict(d)`: a cluster file (schema in docs/models/network.md).

Values enter in the units people quote (GB/s for NVLink, Gb/s for NICs, µs for latencies) and are converted
here, once.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from phantora.models.network.config import ClusterNetworkConfig, cluster_for_node
from phantora.specs.profile import load_profile

_GB = 1e9
_GBIT = 1e9 / 8


def _us(value: float) -> int:
    return int(round(value * 1000))


def cluster_from_flags(*, gpu: str, nodes: int = 1, gpus_per_node: int | None = None) -> ClusterNetworkConfig:
    """The `--gpu h100 --nodes 4 --gpus-per-node 8` form: everything else from the GPU's profile."""
    profile = load_profile(gpu)  # UnknownGpuError is a ValueError
    return cluster_for_node(gpu=profile.key, node=profile.node, nccl=profile.nccl.value, nodes=nodes,
                            gpus_per_node=gpus_per_node)


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

