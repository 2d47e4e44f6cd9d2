"""`--host-time measured`: the host clock advances by the CPU time the program's own code takes.

Note: [Measured host time]
By default the simulated host clock advances only by the host model's constants (models/host.py):
deterministic, but blind to Python the model does not know (a tokenizer in the training loop, a
custom loss written as a Python loop, logging). With `--host-time measured`, each thread that
issues intercepted calls is timed on its own CPU clock (`time.thread_time_ns`): what it spends
*outside* Phantora's interception layer is the program's own work — the user's Python, PyTorch's
Python (`Module.__call__`, optimizers), the autograd engine's C++ and C++ dispatch down to the
point where an op reaches Phantora — and is charged to the host clock, times `--host-time-scale`.
What it spends inside (fake-tensor dispatch, costing, recording, messages to the coordinator: far
more than a real GPU op's host cost) is not. Each op still pays its modelled dispatch and launch
(models/measured_host.py), which the measurement cannot see; the host model's Python terms
(`framework_ns`, module calls, autograd nodes, DTensor's dispatch, the library calls of
runtime/python_costs.py, which is not installed) are not charged, since measuring replaces them.

Where the measurement stops and starts: `HostTimer.enter()` at the outermost entry into the
interception layer charges the thread's CPU time since its last `exit()`, and `exit()` from the
outermost level notes the CPU clock again; nested entries (an op a handler issues, a session call
inside an op) do nothing. Entries are the dispatch mode's `__torch_dispatch__` (every op),
and every `Session` and `EngineLink` call that reads, advances or stamps the host clock, so user
time is settled before any record gets its host time or a clock read returns: `time.perf_counter()`
around a Python loop shows the loop's time. They are instance attributes set only in measured mode,
so the default path is untouched. Phantora's own Python outside those entries (the thin
`torch.cuda` and c10d wrappers) is small and counted as the program's. Part of each op's trip into
the layer happens before `__torch_dispatch__` starts (PyTorch's C++-to-Python trampoline) and after
it returns; `start_measuring` calibrates that as the median round trip of a no-op through the mode
(`entry_overhead_ns`, a few µs) and each charge is that much less.

Not deterministic: CPU time varies between runs, with the machine's load (shared caches, SMT
siblings, frequency scaling) and with the machine itself; `--host-time-scale` converts this
machine's CPU time to the target host's. Known gaps: ops with many arguments take a little longer
to reach the mode than the calibrated no-op, counted as program time; so are C++'s device queries on
fake tensors, which the native shim answers without entering the mode (about 0.5 µs each, two to
three per op: Note [Device queries in C++]); so is the garbage collector
when it runs outside the interception layer (much of its garbage is fake tensors); real CPU tensor
ops run inside the interception layer, so the host model charges them by the bytes they move (models/host.py
Note [Tensor ops on the host]), not by this machine's CPU time; threads that run at the same time
(the autograd engine's device thread runs while the main thread waits, so this is rare) add their
CPU time to the one host clock.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import types
from typing import Any, Callable

SESSION_ENTRIES = ("now_ns", "host_work", "host_wait", "thread_steal_ns", "launch_kernel", "host_only_op", "synchronize_device",
                   "synchronize_stream", "wait_for_stream", "finish")
"""`Session` methods that read, advance or stamp the host clock."""
LINK_ENTRIES = ("advance_host", "sleep", "kernel", "collective", "record_event", "wait_event", "wait_stream", "sync",
                "query", "finish")
"""`EngineLink` methods that read, advance or stamp the host clock (not `flush`: the flusher thread's)."""


def scaled_ns(cpu_ns: int, scale: float) -> int:
    """Measured CPU time in simulated host ns: `cpu_ns` times `scale`, rounded; never negative."""
    return max(0, round(cpu_ns * scale))


class HostTimer:
    """Charges each thread's CPU time outside the interception layer to the host clock.

    `charge(ns)` advances the host clock; `cpu_ns()` reads the calling thread's CPU clock. A thread
    is measured from its first exit from the layer (or `start()`): its CPU time before that is not
    attributed."""

    def __init__(self, charge: Callable[[int], None], *, scale: float = 1.0,
                 cpu_ns: Callable[[], int] = time.thread_time_ns) -> None:
        self._charge = charge
        self.scale = scale
        self._cpu_ns = cpu_ns
        self._local = threading.local()
        self._total_lock = threading.Lock()
        self.charged_ns = 0
        """Host ns charged from measurements so far (all threads), for the rank's result."""
        self._stopped = False
        self.entry_overhead_ns = 0
        """CPU time each entry spends outside the layer, not charged (`calibrate`)."""
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child (a DataLoader worker) runs on its own CPU: it charges nothing."""
        self._stopped = True

    def calibrate(self, probe: Callable[[], Any], repeats: int = 2000) -> int:
        """Measure `entry_overhead_ns`: the CPU time one call of `probe` (a single entry with no work
        around it) spends outside the entry — the C++-to-Python trampoline that brings an op to the
        dispatch mode and back, and the timer's own clock reads — as the median over `repeats` calls.
        Nothing is charged meanwhile. Each charge is then less that much per entry (not below 0)."""
        gaps: list[int] = []
        saved = self._charge, self.scale, self.entry_overhead_ns, self.charged_ns
        self._charge, self.scale, self.entry_overhead_ns = gaps.append, 1.0, 0
        try:
            self.start()
            for _ in range(repeats):
                probe()
        finally:
            self._charge, self.scale, self.entry_overhead_ns, self.charged_ns = saved
        gaps += [0] * (repeats - len(gaps))  # (charges of 0 are not reported)
        gaps.sort()
        self.entry_overhead_ns = gaps[len(gaps) // 2]
        return self.entry_overhead_ns

    def start(self) -> None:
        """Measure the calling thread from now (the program's main thread, before the script runs)."""
        if getattr(self._local, "depth", 0) == 0:
            self._local.last_exit = self._cpu_ns()

    def stop(self) -> None:
        """The program ended: charge the calling thread's time since its last exit, then nothing more
        (what follows is Phantora's own: sending the rest, writing results)."""
        self.enter()
        self._stopped = True
        self.exit()

    def enter(self) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth or self._stopped:
            return
        last = getattr(local, "last_exit", None)
        if last is None:
            return
        ns = scaled_ns(self._cpu_ns() - last - self.entry_overhead_ns, self.scale)
        if ns:
            with self._total_lock:
                self.charged_ns += ns
            self._charge(ns)

    def exit(self) -> None:
        local = self._local
        local.depth -= 1
        if local.depth == 0:
            local.last_exit = self._cpu_ns()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as an entry into the interception layer."""
        enter, exit_ = self.enter, self.exit

        @functools.wraps(fn)
        def entry(*args, **kwargs):
            enter()
            try:
                return fn(*args, **kwargs)
            finally:
                exit_()

        return entry

    def wrap_methods(self, obj: Any, names: tuple[str, ...]) -> None:
        """Make these methods of the instance `obj` entries (instance attributes over the class's)."""
        for name in names:
            setattr(obj, name, self.wrap(getattr(obj, name)))


def install_session_timer(session: Any) -> HostTimer:
    """A timer that charges `session`'s host clock, with its clock-touching calls made entries.
    Charges go straight to the link's clock (under the session lock), not through the entries."""
    link = session.link
    advance = link.advance_host

    def charge(ns: int) -> None:
        with session.lock:
            advance(ns)

    timer = HostTimer(charge, scale=session.config.host_time_scale)
    timer.wrap_methods(link, LINK_ENTRIES)
    timer.wrap_methods(session, SESSION_ENTRIES)
    return timer


def start_measuring(timer: HostTimer, mode: Any) -> None:
    """Make the dispatch mode's `__torch_dispatch__` an entry, calibrate the cost of an entry that
    falls outside it, and start measuring the calling (main) thread. Runs with `mode` entered.

    PyTorch looks `__torch_dispatch__` up on the instance (as does RecordingFakeMode for ops that
    reach it first), so every op enters through the instance attribute; it must stay a method
    bound to the mode (PyTorch checks its `__self__`)."""
    import torch

    mode.__torch_dispatch__ = types.MethodType(timer.wrap(type(mode).__torch_dispatch__), mode)
    with mode.recorder.suppress():  # a fake tensor made for the probe is no allocation of the program
        probe = torch.empty(1, device="cuda")
    device = torch.ops.prim.device.default  # the cheapest round trip through the mode (a pass-through)
    timer.calibrate(lambda: device(probe))
    timer.start()
