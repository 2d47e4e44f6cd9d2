"""Virtual time: the script's clocks read the simulated host clock.

`time.time/perf_counter/monotonic` (and their `_ns` forms) return simulated time, so a script's
own step timers and throughput logs are the prediction. `time.sleep` advances the simulated host
clock instead of sleeping. Standard-library modules that bound `time.monotonic` at import
(threading, queue, multiprocessing) keep the real clock: their timeouts must be real because
they wait for real threads and processes. They are imported before the patch for that reason.
`filelock` (Hugging Face datasets and hub caches, torch's own) polls for other processes' locks with
`time.sleep`; on the simulated clock each poll advanced the rank's time by 50 ms, as many times as the
other ranks happened to hold the lock for real, so TorchTitan's ranks started up to 2.5 s apart at
random and its simulated step changed by up to 0.25 % between runs. It gets a real `time` module.
"""

from __future__ import annotations

import importlib
import time
import types
from typing import Callable

from phantora.units import NS_PER_S, seconds_to_ns

# Modules that capture a clock function at import: import them before patching so they keep it.
import concurrent.futures  # noqa: F401,E402
import multiprocessing  # noqa: F401,E402
import queue  # noqa: F401,E402
import subprocess  # noqa: F401,E402
import threading  # noqa: F401,E402

REAL_TIME = time.time
REAL_TIME_NS = time.time_ns
REAL_PERF_COUNTER = time.perf_counter
REAL_MONOTONIC = time.monotonic
REAL_SLEEP = time.sleep
REAL_TIME_MODULE = types.ModuleType("time")
REAL_TIME_MODULE.__dict__.update(time.__dict__)
"""The time module as it was before the patch, for modules that wait for other processes."""
WAITS_FOR_PROCESSES = ("filelock._api",)
"""Modules whose sleeps and timeouts wait for other processes: they keep the real clock."""


class VirtualClock:
    """Reads and advances the simulated host clock of this process."""

    def __init__(self, now_ns: Callable[[], int], advance_ns: Callable[[int], None]) -> None:
        self._now_ns = now_ns
        self._advance_ns = advance_ns
        self._epoch_ns = REAL_TIME_NS()
        """Wall-clock time at simulated time zero, so `time.time()` still looks like a date."""

    def monotonic_ns(self) -> int:
        return self._now_ns()

    def monotonic(self) -> float:
        return self._now_ns() / NS_PER_S

    def time_ns(self) -> int:
        return self._epoch_ns + self._now_ns()

    def time(self) -> float:
        return self.time_ns() / NS_PER_S

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        self._advance_ns(seconds_to_ns(seconds))
        REAL_SLEEP(0)  # let real threads run, as a real sleep would

    def install(self) -> None:
        time.time, time.time_ns = self.time, self.time_ns
        time.perf_counter, time.perf_counter_ns = self.monotonic, self.monotonic_ns
        time.monotonic, time.monotonic_ns = self.monotonic, self.monotonic_ns
        time.sleep = self.sleep
        for name in WAITS_FOR_PROCESSES:
            try:
                importlib.import_module(name).time = REAL_TIME_MODULE
            except ImportError:  # not installed: nothing of it can run
                pass
