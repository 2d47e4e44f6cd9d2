"""`--host-time counted`: the host clock pays a constant for each Python function call the program makes.

Note: [Counted host time]
The host model (models/host.py) charges Python through terms for what the runtime sees: an op issued from
Python (`framework_ns`), a module call (`module_call_ns`), library calls it wraps. A program whose Python
does much more between its ops than a lean training loop (Megatron-core's tensor-parallel layers,
DeepSpeed ZeRO-3's hooks) is then under-charged, and its host-bound step comes out short
(docs/models/host.md, "Known error"). Counted mode measures that Python by a deterministic count: the
Python function calls (generator resumptions included) each thread that issues ops makes outside
Phantora's interception layer, each charged `python_call_ns` of the GPU profile. A module call is then
Python calls like any other, so `module_call_ns` is 0; the terms fitted beside `python_call_ns`
(`framework_ns`, `autograd_node_ns`, the optimizer step, clip, zero_grad) take their counted-mode values
(`HostConstants.counted`, fitted by benchmarks/host/fit_context.py --counted).

Not counted (csrc/python_calls.cpp Note [Counting the program's Python calls]): a call into code that
would not run on the real machine or has a cost of its own in the model, nor anything it calls:
Phantora's own code (the interception layer; the wrappers through which runtime/python_costs.py charges
library calls, so their Python is their constant's), PyTorch's fake-tensor machinery and the lookups a
dispatch mode makes PyTorch do (`SIMULATION_ONLY`), and the library Python the model charges by constants of
its own (`CHARGED_APART`).

The count is charged where the CPU clock is read in measured mode (runtime/host_time.py): on entering the
interception layer, before anything reads or stamps the host clock, so the Python before an op delays
its launch. Deterministic: the same program makes the same calls. The constant is a mean: a Python call
with a long body costs more than a small accessor, and the fit sees lean training loops'.
"""

from __future__ import annotations

import ctypes
import os
import threading
import types
from collections.abc import Callable
from typing import Any

from phantora.runtime.host_time import LINK_ENTRIES, SESSION_ENTRIES, HostTimer

SIMULATION_ONLY = ("_subclasses/", "_library/simple_registry.py", "utils/_stats.py", "utils/_python_dispatch.py")
"""Files of the torch package (relative to it) whose code runs because tensors are fake and a dispatch mode is
active: FakeTensorMode and FakeTensor's Python properties (`.device`), the dispatch rule lookups PyTorch makes
for each op under a mode, the statistics decorator of fake-tensor dispatch, the mode stack's helpers."""
CHARGED_APART = ("optim/", "nn/utils/clip_grad.py", "utils/data/")
"""Files of the torch package whose Python the host model charges by constants of its own (models/host.py):
optimizers (`optimizer_step_ns`, the foreach and fused terms), gradient clipping (`grad_norm_ns`), the
DataLoader (`dataloader_next_ns`). Their calls from the program are not counted, so that the constants fitted
on whole phases keep their meaning."""


class PythonCalls:
    """The calling thread's count of Python calls outside `outside_paths` (native counter, per thread)."""

    def __init__(self, library: str, outside_paths: list[str]) -> None:
        lib = ctypes.PyDLL(library)  # the calls need the GIL held (PyEval_SetProfile)
        lib.phantora_python_calls.restype = ctypes.c_uint64
        lib.phantora_add_outside_path.argtypes = [ctypes.c_char_p]
        for path in outside_paths:
            lib.phantora_add_outside_path(os.fsencode(path))
        self._lib = lib
        self.calls: Callable[[], int] = lib.phantora_python_calls
        self._counting = threading.local()

    def count_on_this_thread(self) -> None:
        if not getattr(self._counting, "on", False):
            self._lib.phantora_count_python_calls_on_this_thread()
            self._counting.on = True

    def stop_on_this_thread(self) -> None:
        if getattr(self._counting, "on", False):
            self._lib.phantora_stop_counting_python_calls_on_this_thread()
            self._counting.on = False


def outside_paths() -> list[str]:
    """Phantora's package and torch's files that are not the program's to count, as absolute path prefixes."""
    import torch

    import phantora

    torch_dir = os.path.dirname(torch.__file__)
    return [os.path.dirname(phantora.__file__) + os.sep,
            *(os.path.join(torch_dir, part) for part in SIMULATION_ONLY + CHARGED_APART)]


class CallCountTimer(HostTimer):
    """`HostTimer` on Python calls instead of CPU time: each thread's calls outside the interception layer,
    times `python_call_ns`; a thread counts from its first entry into the layer (the main thread from
    `start`)."""

    def __init__(self, charge: Callable[[int], None], counter: PythonCalls, python_call_ns: int) -> None:
        super().__init__(charge, scale=python_call_ns, cpu_ns=counter.calls)
        self.counter = counter

    def start(self) -> None:
        self.counter.count_on_this_thread()
        super().start()

    def enter(self) -> None:
        self.counter.count_on_this_thread()
        super().enter()

    def stop(self) -> None:
        super().stop()
        self.counter.stop_on_this_thread()


def install_call_count_timer(session: Any, library: str) -> CallCountTimer:
    """A timer that charges `session`'s host clock for the program's Python calls, at this rank's host speed,
    with the session's and link's clock-touching calls made entries into the layer."""

    def charge(ns: int) -> None:
        with session.lock:
            session._charge(ns)

    timer = CallCountTimer(charge, PythonCalls(library, outside_paths()), session.host.c.python_call_ns)
    timer.wrap_methods(session.link, LINK_ENTRIES)
    timer.wrap_methods(session, SESSION_ENTRIES)
    return timer


_running: CallCountTimer | None = None
"""The process's timer once counting started."""


def start_counting(timer: CallCountTimer, mode: Any) -> None:
    """Make the dispatch mode's `__torch_dispatch__` an entry and start counting the calling (main) thread
    (as runtime/host_time.py `start_measuring`, with nothing to calibrate: a count has no clock reads)."""
    global _running
    mode.__torch_dispatch__ = types.MethodType(timer.wrap(type(mode).__torch_dispatch__), mode)
    timer.start()
    _running = timer


def counted_calls() -> int | None:
    """The Python calls charged so far in this process (all threads), or None when not counting: lets a script
    compare what the simulation counts with a real run's count (benchmarks/host/measure_launch_bound.py). A
    thread's calls are charged when it next enters the interception layer (a clock read does)."""
    if _running is None or not _running.scale:
        return None
    return _running.charged_ns // round(_running.scale)
