"""Kernel databases beyond the packaged one: combining them, naming the local GPU, the cache.

Note: [Which database entry wins]
A simulation's database is the user's `--kernel-db` files (and the on-the-fly cache) merged over the
database shipped for the GPU. `KernelDatabase.merge` keeps, for a signature in several files, the
entry measured in the more realistic setting (inside a training step > hot microbenchmark > cold),
then the one with more measurements; on a full tie the user's file wins, and among user files the
one given last. So a `phantora profile` result (a cold microbenchmark) replaces a packaged
microbenchmark of the same signature but not a packaged in-step measurement.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from phantora.models.compute import KernelDatabase
from phantora.specs import load_gpu_specs, load_profile


def combined_database(gpu: str, paths: Iterable[str | Path] = (), *, packaged: bool = True) -> KernelDatabase:
    """A fresh database for `gpu`: the files in `paths` (the last given first) over the packaged one
    (Note [Which database entry wins]). Raises ValueError for a file of another GPU or a bad file."""
    dbs = []
    for path in reversed(list(paths)):
        db = KernelDatabase.load(path)
        if db.gpu != gpu:
            raise ValueError(f"kernel database {path} is for {db.gpu}, but the simulated GPU is {gpu}")
        dbs.append(db)
    if packaged:
        dbs.append(load_profile(gpu).kernels.value)
    out = KernelDatabase(gpu)
    for db in dbs:
        out = out.merge(db)  # `merge` keeps its own entry on a tie: earlier in `dbs` wins
    return out


def gpu_key_for_device(name: str) -> str | None:
    """Our GPU spec key for a `torch.cuda.get_device_name()`: the spec whose `name` it is, else the
    spec whose key appears in it as a word ("NVIDIA H100 80GB HBM3" -> "h100"); None if neither."""
    specs = load_gpu_specs()
    for key, spec in specs.items():
        if spec.name == name:
            return key
    low = name.lower()
    for key in sorted(specs, key=len, reverse=True):
        if re.search(rf"(?<![a-z0-9]){re.escape(key)}(?![a-z0-9])", low):
            return key
    return None


_GPU_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def check_gpu_name(name: str) -> str:
    """A database's GPU name as given with --gpu: lower case letters, digits, `_.-`."""
    key = name.lower()
    if not _GPU_NAME.match(key):
        raise ValueError(f"bad GPU name {name!r}: use letters, digits, '_', '.', '-' (e.g. h200)")
    return key


def default_cache_dir() -> Path:
    """Where on-the-fly measurements are kept: $PHANTORA_CACHE_DIR, else $XDG_CACHE_HOME/phantora/kernels,
    else ~/.cache/phantora/kernels."""
    if os.environ.get("PHANTORA_CACHE_DIR"):
        return Path(os.environ["PHANTORA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phantora" / "kernels"


def cache_file(cache_dir: str | Path, gpu: str) -> Path:
    """The on-the-fly database of one GPU model in a cache folder."""
    return Path(cache_dir) / f"{gpu}.jsonl"
