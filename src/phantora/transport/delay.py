"""Random real-time delays in the ranks and the coordinator server, to show that results do not depend on OS
scheduling (a debug knob for determinism tests; off by default).

`PHANTORA_DEBUG_RANDOM_DELAY_MS=N`: sleep a random 0..N ms of real time before each batch a rank sends and
before the server hands each batch to the coordinator. `PHANTORA_DEBUG_RANDOM_DELAY_SEED=S`: the delays
come from generators seeded with S and the process's role (`rank 3`, `server`), so a run's timing pattern
can be replayed; without it they come from the OS's entropy. Either way the simulated results must be
the same: the coordinator's Note [Determinism].
"""

from __future__ import annotations

import os
import random
import select

DELAY_ENV_VAR = "PHANTORA_DEBUG_RANDOM_DELAY_MS"
SEED_ENV_VAR = "PHANTORA_DEBUG_RANDOM_DELAY_SEED"


class RandomDelay:
    """Sleeps 0..max_ms real milliseconds (never the simulated clock: `select`, not `time.sleep`)."""

    def __init__(self, max_ms: float, rng: random.Random) -> None:
        self.max_s = max_ms / 1000
        self._rng = rng

    def next_s(self) -> float:
        return self._rng.uniform(0.0, self.max_s)

    def __call__(self) -> None:
        seconds = self.next_s()
        if seconds > 0:
            select.select([], [], [], seconds)

    @classmethod
    def from_env(cls, role: str) -> "RandomDelay | None":
        """The delay the environment asks for in the process playing `role`, or None (the default)."""
        raw = os.environ.get(DELAY_ENV_VAR, "").strip()
        if not raw:
            return None
        try:
            max_ms = float(raw)
        except ValueError:
            raise ValueError(f"{DELAY_ENV_VAR} must be a number of milliseconds, got {raw!r}") from None
        if not max_ms >= 0:
            raise ValueError(f"{DELAY_ENV_VAR} must be >= 0, got {raw!r}")
        seed = os.environ.get(SEED_ENV_VAR, "").strip()
        rng = random.Random(f"{seed}/{role}") if seed else random.Random(int.from_bytes(os.urandom(16), "little"))
        return cls(max_ms, rng) if max_ms > 0 else None
