"""Typed description of one GPU model (the data lives in `phantora/specs/gpus.toml`)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    max_threads_per_sm: int = 2048
    warp_size: int = 32
    sources: dict[str, str] = field(default_factory=dict)
    """Where each number comes from."""

    def __post_init__(self) -> None:
        if self.total_memory_bytes <= self.cuda_context_bytes:
            raise ValueError(f"GPU spec {self.key}: total memory must exceed the CUDA context size")
        if self.memory_bandwidth_bytes_per_s <= 0 or self.sm_count <= 0:
            raise ValueError(f"GPU spec {self.key}: bandwidth and SM count must be positive")
