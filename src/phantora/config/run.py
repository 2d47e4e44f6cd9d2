"""The configuration of one simulated process, built by the CLI and read by the rank runtime."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from phantora.models.host_contention import DEFAULT_HOST_CONTENTION, HOST_CONTENTION_CHOICES

CONFIG_ENV_VAR = "PHANTORA_RUN_CONFIG"
"""The CLI hands the rank process its `RankConfig` as JSON through this variable."""
HOST_TIME_MODES = ("model", "measured")
"""`--host-time` choices; "model" (deterministic) is the default."""


def positive_finite(value: object) -> float:
    """`value` as a float; ValueError unless it is a number (not a bool or text), finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class RankConfig:
    """Everything a rank process needs to simulate its GPU(s)."""

    gpu: str
    """The GPU's profile key (`phantora.specs`, a folder of specs/), e.g. "h200"; the rank resolves it once."""
    gpu_variant: dict | None = None
    """The cluster file's `[variant]` of that GPU as `GpuVariant`'s fields (checked by the CLI), or None:
    the rank applies it to the profile (`phantora.specs.profile_for`)."""
    devices_per_process: int = 1
    """How many CUDA devices the process sees (torch.cuda.device_count())."""
    out_dir: str = "phantora-out"
    strict: bool = False
    """Fail on the first op that only gets a generic (unmodelled) cost estimate."""
    use_kernel_database: bool = True
    """Look measured kernel times up before the analytic model."""
    rank: int = 0
    world_size: int = 1
    folded_axes: tuple[tuple[int, int], ...] = ()
    """The mesh axes (stride, size) folded onto representative ranks (protocol/symmetry.py Note
    [Representative ranks]); empty: every rank runs its own process."""
    coordinator: str = ""
    """host:port of the launcher's coordinator server, which places this rank's GPU work."""
    trace: bool = True
    """Write a Perfetto/Chrome trace of the simulated timeline."""
    kernel_databases: tuple[str, ...] = ()
    """Extra measured-kernel databases (`--kernel-db`, `phantora profile` output), merged over the
    packaged one; on a tie the last given wins (profiler/database.py Note [Which database entry wins])."""
    profile_worker: str = ""
    """"host:port#token" of the on-the-fly profiler worker (`--profile-on-the-fly`), which measures ops
    that no database has on the real GPU; empty: off."""
    host_time: str = "model"
    """How the simulated host clock advances between intercepted calls (`--host-time`): "model", the
    host model's constants (deterministic), or "measured", the CPU time the program's own code took on
    this machine (runtime/host_time.py Note [Measured host time])."""
    host_time_scale: float = 1.0
    """`--host-time-scale`: the target host CPU's time for the same work over the reference one's (below
    1: a faster CPU). With host_time "model" every host-model constant is multiplied by it (the reference
    is the host CPU the GPU profile's constants were measured on); with "measured", the measured CPU time
    (the reference is this machine)."""

    host_contention: str = DEFAULT_HOST_CONTENTION
    """`--host-contention`: how contended the target cluster's host CPUs are (models/host_contention.py
    Note [Contended hosts]): one of `HOST_CONTENTION_CHOICES`. Host model only."""

    def __post_init__(self) -> None:
        if self.host_contention not in HOST_CONTENTION_CHOICES:
            raise ValueError(f"--host-contention must be one of {', '.join(HOST_CONTENTION_CHOICES)}, "
                             f"got {self.host_contention!r}")
        if not 1 <= self.devices_per_process <= 64:
            raise ValueError(f"devices per process must be between 1 and 64, got {self.devices_per_process}")
        if self.host_time not in HOST_TIME_MODES:
            raise ValueError(f"--host-time must be one of {', '.join(HOST_TIME_MODES)}, got {self.host_time!r}")
        try:
            scale = positive_finite(self.host_time_scale)
        except ValueError as error:
            raise ValueError(f"--host-time-scale {error}") from None
        object.__setattr__(self, "host_time_scale", scale)
        object.__setattr__(self, "kernel_databases", tuple(self.kernel_databases))  # a list after JSON
        object.__setattr__(self, "folded_axes", tuple(tuple(a) for a in self.folded_axes))

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> "RankConfig":
        raw = os.environ.get(CONFIG_ENV_VAR)
        if raw is None:
            raise RuntimeError(f"{CONFIG_ENV_VAR} is not set: start scripts with `phantora run`")
        return cls(**json.loads(raw))

    @property
    def rank_dir(self) -> Path:
        return Path(self.out_dir) / f"rank{self.rank}"
