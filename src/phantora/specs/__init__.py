"""GPU and topology specs shipped with Phantora, as data files with a source per number."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from phantora.models.gpu import GpuSpec


class UnknownGpuError(ValueError):
    """Raised for a GPU name that has no spec; the message lists the known ones."""


@cache
def load_gpu_specs() -> dict[str, GpuSpec]:
    """All GPU specs shipped with Phantora, keyed by their short name."""
    text = resources.files("phantora.specs").joinpath("gpus.toml").read_text()
    raw = tomllib.loads(text)
    specs = {}
    for key, entry in raw["gpu"].items():
        entry = dict(entry)
        entry["compute_capability"] = tuple(entry["compute_capability"])
        specs[key] = GpuSpec(key=key, **entry)
    return specs


def get_gpu_spec(key: str) -> GpuSpec:
    specs = load_gpu_specs()
    spec = specs.get(key.lower())
    if spec is None:
        raise UnknownGpuError(f"unknown GPU '{key}'; known GPUs: {', '.join(sorted(specs))}")
    return spec
