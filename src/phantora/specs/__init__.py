"""What Phantora knows about each GPU model: one `DeviceProfile` per model (`specs/<gpu>/`), read by
`load_profile`, and the cluster built from a GPU's node defaults or a cluster file (`specs/cluster.py`)."""

from __future__ import annotations

from phantora.models.gpu import GpuSpec
from phantora.specs.profile import (
    DeviceProfile,
    Part,
    ProfileError,
    UnknownGpuError,
    gpu_key,
    known_gpus,
    apply_variant,
    load_profile,
    profile_for,
)

__all__ = ["DeviceProfile", "Part", "ProfileError", "UnknownGpuError", "apply_variant", "get_gpu_spec", "gpu_key",
           "known_gpus", "load_gpu_specs", "load_profile", "profile_for"]


def load_gpu_specs() -> dict[str, GpuSpec]:
    """The spec of every GPU that has a profile, keyed by its short name."""
    return {key: load_profile(key).spec for key in known_gpus()}


def get_gpu_spec(name: str) -> GpuSpec:
    """The spec of GPU `name` (case-insensitive); UnknownGpuError lists the known ones."""
    return load_profile(name).spec
