"""Typed description of one GPU model (the data lives in `phantora/specs/<gpu>/profile.toml`), and of a variant
of one: the same silicon with other memory, bandwidth, power limit or clocks, described in a cluster file."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """What Phantora knows about one GPU model. Every number in the TOML file cites a source."""

    key: str
    """Short name used on the command line, e.g. "h200"."""
    name: str
    """Name as `torch.cuda.get_device_name()` reports it on the real device, e.g. "NVIDIA H200"."""
    compute_capability: tuple[int, int]
    sm_count: int
    total_memory_bytes: int
    """`torch.cuda.get_device_properties().total_memory` on the real device."""
    cuda_context_bytes: int
    """Device memory taken by the CUDA context and libraries before PyTorch allocates anything."""
    l2_cache_bytes: int
    memory_bandwidth_bytes_per_s: float
    """Datasheet peak HBM bandwidth."""
    peak_flops: dict[str, float] = field(default_factory=dict)
    """Dense peak FLOP/s per math mode: "bf16", "fp16", "tf32", "fp32", "fp64", "fp8" (tensor cores where they apply; "fp32" is CUDA-core FP32)."""
    memory_gbytes: float | None = None
    """Memory size as the datasheet names it (80 for "80GB"): a variant's size is given the same way."""
    memory_type: str = ""
    """"HBM3", "HBM2e", ...: descriptive (the bandwidth is what the models use)."""
    boost_clock_mhz: float | None = None
    """Maximum SM clock, at which `peak_flops` are quoted; None where no source gives it."""
    max_threads_per_sm: int = 2048
    warp_size: int = 32
    sources: dict[str, str] = field(default_factory=dict)
    """Where each number comes from."""
    base: GpuSpec | None = None
    """For a variant (`GpuVariant.apply`): the GPU whose measurements (kernel times, energies) it uses."""
    derived: Mapping[str, str] = field(default_factory=dict)
    """For a variant: field -> how its value was derived from the base's rather than measured or given."""

    def __post_init__(self) -> None:
        if self.total_memory_bytes <= self.cuda_context_bytes:
            raise ValueError(f"GPU spec {self.key}: total memory must exceed the CUDA context size")
        if self.memory_bandwidth_bytes_per_s <= 0 or self.sm_count <= 0:
            raise ValueError(f"GPU spec {self.key}: bandwidth and SM count must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuVariant:
    """Another part of a profiled GPU: what differs from the base (None = the base's value). Values are in
    the units datasheets quote; a cluster file's `[variant]` table holds them (specs/cluster.py)."""

    name: str | None = None
    """What `torch.cuda.get_device_name()` reports on it."""
    memory_gbytes: float | None = None
    """Datasheet memory size ("96GB": 96); torch's total_memory follows from the base's ratio."""
    total_memory_bytes: int | None = None
    """torch's `total_memory` where it is known exactly (instead of memory_gbytes)."""
    memory_type: str | None = None
    memory_bandwidth_gbytes_per_s: float | None = None
    """Peak HBM bandwidth, GB/s."""
    power_limit_w: float | None = None
    """Board power limit (nvidia-smi "Current Power Limit")."""
    boost_clock_mhz: float | None = None
    """Maximum SM clock: peak FLOP/s scale with it from the base's."""

    def __post_init__(self) -> None:
        for name in ("memory_gbytes", "memory_bandwidth_gbytes_per_s", "power_limit_w", "boost_clock_mhz",
                     "total_memory_bytes"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.memory_gbytes is not None and self.total_memory_bytes is not None:
            raise ValueError("give memory_gbytes or total_memory_bytes, not both")
        for name in ("name", "memory_type"):
            if getattr(self, name) == "":
                raise ValueError(f"{name} must not be empty")

    def given(self) -> dict[str, object]:
        """The fields the variant sets."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}

    def apply(self, base: GpuSpec) -> GpuSpec:
        """The variant's spec: the base's, with what the variant gives and what follows from it. Note [GPU variants]."""
        if base.base is not None:
            raise ValueError(f"{base.key} is already a variant")
        changes: dict[str, object] = {}
        derived: dict[str, str] = {}
        sources = dict(base.sources)
        for name in self.given():
            sources[name] = "cluster file [variant]"
        if self.name is not None:
            changes["name"] = self.name
        if self.memory_type is not None:
            changes["memory_type"] = self.memory_type
        if self.total_memory_bytes is not None:
            changes["total_memory_bytes"] = int(self.total_memory_bytes)
        if self.memory_gbytes is not None:
            if base.memory_gbytes is None:
                raise ValueError(f"memory_gbytes: the {base.key} profile gives no datasheet memory size to scale "
                                 "from; give total_memory_bytes")
            changes["memory_gbytes"] = self.memory_gbytes
            scaled = base.total_memory_bytes * self.memory_gbytes / base.memory_gbytes
            changes["total_memory_bytes"] = int(round(scaled))
            derived["total_memory_bytes"] = (f"{base.key}'s torch total_memory x {self.memory_gbytes:g} / "
                                             f"{base.memory_gbytes:g} GB (the driver keeps the same share)")
        if self.memory_bandwidth_gbytes_per_s is not None:
            changes["memory_bandwidth_bytes_per_s"] = self.memory_bandwidth_gbytes_per_s * 1e9
        if self.boost_clock_mhz is not None:
            if base.boost_clock_mhz is None:
                raise ValueError(f"boost_clock_mhz: the {base.key} profile gives no boost clock to scale its "
                                 "peak FLOP/s from")
            ratio = self.boost_clock_mhz / base.boost_clock_mhz
            changes["boost_clock_mhz"] = self.boost_clock_mhz
            changes["peak_flops"] = {mode: peak * ratio for mode, peak in base.peak_flops.items()}
            derived["peak_flops"] = f"{base.key}'s x {self.boost_clock_mhz:g} / {base.boost_clock_mhz:g} MHz"
        if self.given().keys() - {"name"} and self.name is None:
            derived["name"] = f"{base.key}'s (no name given)"
        try:
            return dataclasses.replace(base, base=base, derived=derived, sources=sources, **changes)
        except ValueError as error:
            raise ValueError(f"variant of {base.key}: {error}") from None
