"""The cluster the simulation runs on, from `--gpu` flags or a cluster file, with the GPU profile's defaults.

Two ways in, one validated `ClusterNetworkConfig` (models/network/config.py):
- `cluster_from_flags(gpu="h100", nodes=4, gpus_per_node=8)`: the `--gpu/--nodes/--gpus-per-node` style, every
  other value from the GPU's profile (its node and NCCL tuning: specs/<gpu>/profile.toml, nccl.json);
- `cluster_from_toml(path)` / `cluster_from_toml_dict(d)`: a cluster file (schema in docs/models/network.md),
  with an optional `[variant]` of the GPU (models/gpu.py `GpuVariant`).
`with_overrides` applies the what-if flags (`--gpus-per-node`, `--nic-gbps`) to either, as the cluster file's
fields of the same meaning would.

Values enter in the units people quote (GB/s for NVLink and HBM, Gb/s for NICs, µs for latencies) and are
converted here, once. Every value is checked for its type (a quoted number or `1` for `true` is a mistake, not
a value), and every mistake is one line naming the key.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from phantora.models.gpu import GpuVariant
from phantora.models.network.config import ClusterNetworkConfig, cluster_for_node
from phantora.specs.profile import apply_variant, load_profile

_GB = 1e9
_GBIT = 1e9 / 8


# --- typed values -------------------------------------------------------------------------------------
def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError("must be finite")
    return float(value)


def _positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError("must be > 0")
    return number


def _non_negative(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise ValueError("must be >= 0")
    return number


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, got {type(value).__name__}")
    return value


def _count(value: Any) -> int:
    number = _integer(value)
    if number < 1:
        raise ValueError("must be >= 1")
    return number


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {type(value).__name__}")
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of strings")
    return tuple(value)


def _us(value: Any) -> int:
    return int(round(_non_negative(value) * 1000))


# --- the schema -----------------------------------------------------------------------------------------
Schema = Mapping[str, tuple[str, Callable[[Any], Any]]]

_TOML_TABLES: dict[str, Schema] = {
    "nvlink": {
        "bandwidth_gbytes_per_s": ("bandwidth_bytes_per_s", lambda v: _positive(v) * _GB),
        "latency_us": ("latency_ns", _us),
    },
    "nic": {
        "nics_per_node": ("nics_per_node", _count),
        "bandwidth_gbits_per_s": ("bandwidth_bytes_per_s", lambda v: _positive(v) * _GBIT),
        "latency_us": ("latency_ns", _us),
    },
    "fabric": {
        "kind": ("kind", _string),
        "nodes_per_leaf": ("nodes_per_leaf", _count),
        "spines": ("spines", _count),
        "oversubscription": ("oversubscription", _positive),
        "rail_optimized": ("rail_optimized", _boolean),
        "switch_latency_us": ("switch_latency_ns", _us),
    },
    "nccl": {
        "algorithms": ("algorithms", _strings),
        "protocols": ("protocols", _strings),
    },
}
"""table -> {TOML key: (dataclass field, converter)}: the network's tables."""

_VARIANT: Schema = {
    "name": ("name", _string),
    "memory_gbytes": ("memory_gbytes", _positive),
    "total_memory_bytes": ("total_memory_bytes", _count),
    "memory_type": ("memory_type", _string),
    "memory_bandwidth_gbytes_per_s": ("memory_bandwidth_gbytes_per_s", _positive),
    "power_limit_w": ("power_limit_w", _positive),
    "boost_clock_mhz": ("boost_clock_mhz", _positive),
}
"""The `[variant]` table: `GpuVariant`'s fields."""

_TOP: Schema = {"gpu": ("gpu", _string), "nodes": ("nodes", _count), "gpus_per_node": ("gpus_per_node", _count)}


def _read_table(raw: Any, schema: Schema, where: str) -> dict[str, Any]:
    """{field: value} of one table, each key known and each value of its type."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(raw) - set(schema))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(sorted(schema))}")
    values = {}
    for key, value in raw.items():
        name, convert = schema[key]
        try:
            values[name] = convert(value)
        except ValueError as error:
            raise ValueError(f"{where} {key} = {value!r}: {error}") from None
    return values


# --- building -------------------------------------------------------------------------------------------
def cluster_from_flags(*, gpu: str, nodes: int = 1, gpus_per_node: int | None = None) -> ClusterNetworkConfig:
    """The `--gpu h100 --nodes 4 --gpus-per-node 8` form: everything else from the GPU's profile."""
    profile = load_profile(gpu)  # UnknownGpuError is a ValueError
    return cluster_for_node(gpu=profile.key, node=profile.node, nccl=profile.nccl.value, nodes=nodes,
                            gpus_per_node=gpus_per_node)


def cluster_from_toml_dict(data: Mapping[str, Any], *, where: str = "cluster file") -> ClusterNetworkConfig:
    """Build the config from a parsed cluster TOML. Every key must be known: a misspelled one
    (`nic_gbps` for `bandwidth_gbits_per_s`) would describe a cluster the user did not mean."""
    tables = {**_TOML_TABLES, "variant": _VARIANT}
    unknown = sorted(set(data) - set(_TOP) - set(tables))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(_TOP)} and the tables "
                         f"{', '.join(f'[{t}]' for t in tables)}")
    if "gpu" not in data:
        raise ValueError(f"{where}: missing required key 'gpu'")
    top = _read_table({k: v for k, v in data.items() if k in _TOP}, _TOP, where)
    try:
        base = cluster_from_flags(**top)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    parts: dict[str, Any] = {"nvlink": base.nvlink, "nic": base.nic, "fabric": base.fabric, "nccl": base.nccl}
    for table, schema in _TOML_TABLES.items():
        if table in data:
            updates = _read_table(data[table], schema, f"{where}: [{table}]")
            try:
                parts[table] = replace(parts[table], **updates)
            except ValueError as error:
                raise ValueError(f"{where}: [{table}]: {error}") from None
    if "variant" in data:
        parts["gpu_variant"] = _variant(base.gpu, _read_table(data["variant"], _VARIANT, f"{where}: [variant]"), where)
    try:
        return replace(base, **parts)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _variant(gpu: str, fields: Mapping[str, Any], where: str) -> GpuVariant:
    """The variant, checked against its base GPU's profile now, so that a rank never meets a bad one."""
    try:
        variant = GpuVariant(**fields)
        apply_variant(load_profile(gpu), variant)
    except ValueError as error:
        raise ValueError(f"{where}: [variant] {error}") from None
    return variant


def cluster_from_toml(path: str | Path) -> ClusterNetworkConfig:
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"cluster file {p} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"cluster file {p} is a directory") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"cluster file {p} is not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cluster file {p} is not UTF-8 text") from None
    return cluster_from_toml_dict(data, where=str(p))


def with_overrides(cluster: ClusterNetworkConfig, *, gpus_per_node: int | None = None,
                   nic_gbits_per_s: float | None = None) -> ClusterNetworkConfig:
    """The cluster with the what-if flags applied: `--gpus-per-node` as the cluster file's `gpus_per_node`
    (the NVLink domain; the NICs per node become as many as the node has GPUs, up to the GPU's DGX/HGX count,
    as the file's default), `--nic-gbps` as `[nic] bandwidth_gbits_per_s`."""
    if gpus_per_node is not None:
        profile = load_profile(cluster.gpu)
        resized = cluster_for_node(gpu=cluster.gpu, node=profile.node, nccl=cluster.nccl, nodes=cluster.nodes,
                                   gpus_per_node=gpus_per_node)
        cluster = replace(cluster, gpus_per_node=gpus_per_node,
                          nic=replace(cluster.nic, nics_per_node=resized.nic.nics_per_node))
    if nic_gbits_per_s is not None:
        cluster = replace(cluster, nic=replace(cluster.nic, bandwidth_bytes_per_s=nic_gbits_per_s * _GBIT))
    return cluster
