"""Virtual time: the script's clocks read the simulated host clock.

`time.time/perf_counter/monotonic` (and their `_ns` forms) return simulated time, so a script's
own step timers and throughput logs are the prediction. `time.sleep` in the main thread advances the
simulated host clock instead of sleeping; in another thread (Lightning's progress bar refreshes itself
every 10 ms) it sleeps for real: it does not delay the program's main thread, whose clock it would have
moved by minutes.

Note: [Code that waits for other processes]
The rule: the simulated clock is for code that measures the program; code that waits for something
outside it (another process or thread, a lock file, a socket, a server) reads and sleeps on the real
clock. A clock read cannot tell which it serves, so the rule is applied by who calls:
- a call whose calling frame is in a module of `REAL_CLOCK_PACKAGES` is real. Those are the libraries'
  waiting machinery: `multiprocessing` (pipes, queues, a DataLoader worker's check that its parent
  lives), `subprocess`, `concurrent.futures`, `threading`, `queue`, `asyncio` (its event loop's
  timers), `socketserver`, `filelock` (Hugging Face caches) and `torch.utils.file_baton` (extension
  builds), `torch.multiprocessing` (spawn's joins), `torch.distributed.distributed_c10d` (the
  store-based barrier that polls rank 0's store), `torch.distributed.elastic` (agents, rendezvous,
  timers), `torch._inductor.compile_worker` (compile workers), `urllib3` and `huggingface_hub.utils._http`
  (network timeouts and retry back-off), and Phantora's own polling;
- `time.sleep` outside the program's main thread is real: a background thread (Lightning's progress
  bar refreshing itself every 10 ms) does not delay the training loop, whose clock it would move;
- a process forked from a rank (DataLoader workers, a fork-started pool) is no simulated host: it
  has the real clock throughout (`_forked`), and never touches the rank's session;
- everything else (the program, the frameworks' step timers, throughput logs and logging
  timestamps, tqdm) reads simulated time.
On the simulated clock a wait goes wrong: a frozen clock never reaches a deadline (forked DataLoader
workers outlived their parent; an asyncio timer never fires), and each poll's sleep advances the
rank's simulated time by as much as the other process happened to take (torch's file baton once took
a rank's clock to 53,240 s; Hugging Face's lock polling started TorchTitan's ranks up to 2.5 s apart
at random). Looking at the caller, not patching the modules, also covers names bound at import
(`from time import monotonic`) and modules imported later. Modules imported before the patch that
bound a clock function by name get the patched one (tqdm's progress bars), except those of
`REAL_CLOCK_PACKAGES`, which keep the real one.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from phantora.units import NS_PER_S, seconds_to_ns

# Modules that capture a clock function at import: import them before patching so they keep it.
import asyncio  # noqa: F401,E402
import concurrent.futures  # noqa: F401,E402
import multiprocessing  # noqa: F401,E402
import queue  # noqa: F401,E402
import subprocess  # noqa: F401,E402
import threading  # noqa: F401,E402

REAL_TIME = time.time
REAL_TIME_NS = time.time_ns
REAL_PERF_COUNTER = time.perf_counter
REAL_PERF_COUNTER_NS = time.perf_counter_ns
REAL_MONOTONIC = time.monotonic
REAL_MONOTONIC_NS = time.monotonic_ns
REAL_SLEEP = time.sleep
REAL_CLOCKS = {"time": REAL_TIME, "time_ns": REAL_TIME_NS, "perf_counter": REAL_PERF_COUNTER,
               "perf_counter_ns": REAL_PERF_COUNTER_NS, "monotonic": REAL_MONOTONIC,
               "monotonic_ns": REAL_MONOTONIC_NS, "sleep": REAL_SLEEP}
"""The `time` module's clock functions as they were before the patch, by name."""
REAL_CLOCK_PACKAGES = ("multiprocessing", "subprocess", "concurrent.futures", "threading", "queue", "asyncio",
                       "socketserver", "filelock", "torch.utils.file_baton", "torch.multiprocessing",
                       "torch.distributed.distributed_c10d", "torch.distributed.elastic",
                       "torch._inductor.compile_worker", "urllib3", "huggingface_hub.utils._http", "phantora")
"""Packages (and modules) whose clock reads and sleeps wait for other processes: Note [Code that waits
for other processes]."""

_real_clock_callers: dict[str, bool] = {}
_forked = False
"""True in a process forked from a rank: it keeps the real clock (Note [Code that waits for other processes])."""


def _after_fork_in_child() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def forked_from_rank() -> bool:
    """Whether this process was forked from a rank (a DataLoader worker, a fork-started pool): no simulated host,
    so it must never touch the rank's session."""
    return _forked


def forked_as_rank() -> None:
    """This process was forked by the fork server to be a rank (runtime/zygote.py), not by a rank: it keeps the
    simulated clock."""
    global _forked
    _forked = False


def _wants_real_clock(module: str) -> bool:
    known = _real_clock_callers.get(module)
    if known is None:
        known = any(module == p or module.startswith(p + ".") for p in REAL_CLOCK_PACKAGES)
        _real_clock_callers[module] = known
    return known


def _caller_wants_real_clock() -> bool:
    """Whether the code calling a clock function (two frames up: the caller of the patched function)
    is in a package of `REAL_CLOCK_PACKAGES`."""
    return _wants_real_clock(sys._getframe(2).f_globals.get("__name__") or "")


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
        """The program's main thread (its training loop) waits in simulated time; another thread's sleep (a
        progress bar refreshing itself) does not delay the main thread, so it sleeps for real."""
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        if threading.current_thread() is not threading.main_thread():
            REAL_SLEEP(seconds)
            return
        self._advance_ns(seconds_to_ns(seconds))
        REAL_SLEEP(0)  # let real threads run, as a real sleep would

    def install(self) -> None:
        """Patch the `time` module; callers in `REAL_CLOCK_PACKAGES` keep the real clock."""
        time.time = _unless_real(self.time, REAL_TIME)
        time.time_ns = _unless_real(self.time_ns, REAL_TIME_NS)
        time.perf_counter = _unless_real(self.monotonic, REAL_PERF_COUNTER)
        time.perf_counter_ns = _unless_real(self.monotonic_ns, REAL_PERF_COUNTER_NS)
        time.monotonic = _unless_real(self.monotonic, REAL_MONOTONIC)
        time.monotonic_ns = _unless_real(self.monotonic_ns, REAL_MONOTONIC_NS)
        time.sleep = _unless_real(self.sleep, REAL_SLEEP)
        self._rebound = _rebind_imported_clocks()

    def uninstall(self) -> None:
        """Undo `install` (for tests: a rank process keeps its clock until it exits)."""
        for name, real in REAL_CLOCKS.items():
            setattr(time, name, real)
        for namespace, attribute, real in getattr(self, "_rebound", ()):
            namespace[attribute] = real


def _rebind_imported_clocks() -> list[tuple[dict, str, Callable]]:
    """Modules imported before the patch that bound a clock function by name (`from time import time`: tqdm's
    progress bar and rate, `timeit`) get the patched one; the patched functions give callers of
    `REAL_CLOCK_PACKAGES` the real clock anyway. Returns what it changed: (namespace, name, real function)."""
    patched = {id(real): (real, getattr(time, name)) for name, real in REAL_CLOCKS.items()}
    rebound = []
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if module is time or not namespace or _wants_real_clock(name):
            continue
        for attribute, value in list(namespace.items()):
            real, replacement = patched.get(id(value), (None, None))
            if value is real:
                namespace[attribute] = replacement
                rebound.append((namespace, attribute, real))
    return rebound


def _unless_real(simulated: Callable, real: Callable) -> Callable:
    """`simulated`, except for callers that wait for other processes, which get `real`."""

    def clock(*args):
        return real(*args) if _forked or _caller_wants_real_clock() else simulated(*args)

    clock.__name__ = clock.__qualname__ = real.__name__
    clock.__doc__ = real.__doc__
    return clock
