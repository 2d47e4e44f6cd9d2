"""Run a training program under cProfile and keep, per Python function, its calls and its own time (pstats), over
its steady steps.

    [PROFILE_AFTER_STEP=K] [PROFILE_ALTERNATE=1] python -m benchmarks.host.profile_python OUT SCRIPT ARGS...
    [PROFILE_AFTER_STEP=K] [PROFILE_ALTERNATE=1] torchrun ... -m benchmarks.host.profile_python OUT SCRIPT ARGS...
                                                                                    # each rank: OUT.rank<R>.*
    ... -m benchmarks.host.profile_python OUT -m MODULE ARGS...                     # a module's program

Profiling starts when the program's K-th optimizer step returns (default 4: PyTorch's global optimizer step hooks, which
every framework's optimizer reaches through the torch optimizer it wraps; an optimizer stepping others is one step) and
ends with the program; `OUT.rank<R>.json` says how many optimizer steps it saw, so the statistics are per step.
cProfile follows only the thread that started it, and the autograd engine runs a CUDA backward pass (with the
program's hooks in it) on a thread of its own: so the engine's multithreading is off here and the backward runs on the
calling thread. Timings are cProfile's, its own
cost in them: the JSON also holds what a profiled call of an empty Python function costs on this machine, profiled and
not, to correct for it, and the host's speed during the profiled steps: after each optimizer step from the K-th on,
the profiler pauses for a fixed pure-Python loop (benchmarks/workloads/timeline.py, `python_loop_probe_us`), the
probe the ground truth's timelines take, so that a time per call can be brought to the reference host.

With PROFILE_ALTERNATE=1 only every other step after the K-th is profiled (the first of them is), and the JSON gets
each of those steps' host time (`step_host_s`, optimizer step to optimizer step, the probe left out) and whether it
was profiled: in a host-bound program the difference is what profiling costs in situ, which an empty function's
calibration under-states for programs of many small calls (docs/models/host.md, Library Python).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys
import time

CALIBRATION_CALLS = 1_000_000


def _empty() -> None:
    pass


def _caller(n: int) -> None:
    for _ in range(n):
        _empty()


def _loop(n: int) -> None:
    for _ in range(n):
        pass


def calibration() -> dict:
    """ns per call of an empty function: unprofiled, and profiled (the callee's and the caller's own time)."""
    start = time.perf_counter_ns()
    _caller(CALIBRATION_CALLS)
    plain_call = time.perf_counter_ns() - start
    start = time.perf_counter_ns()
    _loop(CALIBRATION_CALLS)
    plain_loop = time.perf_counter_ns() - start
    profile = cProfile.Profile()
    profile.enable()
    _caller(CALIBRATION_CALLS)
    profile.disable()
    stats = pstats.Stats(profile).stats
    own = {func[2]: row[2] for func, row in stats.items()}  # name -> total own time, s
    return {"calls": CALIBRATION_CALLS, "plain_call_and_loop_ns": plain_call / CALIBRATION_CALLS,
            "plain_loop_ns": plain_loop / CALIBRATION_CALLS,
            "profiled_callee_own_ns": own["_empty"] * 1e9 / CALIBRATION_CALLS,
            "profiled_caller_own_ns": own["_caller"] * 1e9 / CALIBRATION_CALLS}


def main() -> None:
    out, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    import torch
    from benchmarks.host.probe_steps import on_each_optimizer_step, run_as_main
    from benchmarks.workloads.timeline import python_loop_probe_us

    torch.autograd.set_multithreading_enabled(False)
    rank = os.environ.get("RANK", "0")
    after = int(os.environ.get("PROFILE_AFTER_STEP", "4"))
    record = {"profile_after_step": after, "calibration": calibration()}
    profile = cProfile.Profile()
    steps = [0]

    alternate = os.environ.get("PROFILE_ALTERNATE") == "1"
    probes: list[float] = []
    step_host_s: list[tuple[bool, float]] = []
    """(profiled, host seconds) of each step after the K-th, with PROFILE_ALTERNATE."""
    last = [0.0]

    def count_step() -> None:
        steps[0] += 1
        if steps[0] > after:
            profile.disable()
            step_host_s.append((not alternate or (steps[0] - after) % 2 == 1, time.perf_counter() - last[0]))
        if steps[0] >= after:
            probes.append(python_loop_probe_us())
            if not alternate or (steps[0] - after) % 2 == 0:
                profile.enable()
        last[0] = time.perf_counter()

    on_each_optimizer_step(count_step)
    try:
        run_as_main(script, args)
    finally:
        profile.disable()
        profile.dump_stats(f"{out}.rank{rank}.pstats")
        record["optimizer_steps"] = steps[0]
        record["profiled_steps"] = sum(1 for profiled, _ in step_host_s if profiled)
        if alternate:
            record["step_host_s"] = step_host_s
        record["python_loop_probe_us"] = probes
        with open(f"{out}.rank{rank}.json", "w") as f:
            json.dump(record, f)


if __name__ == "__main__":
    main()
