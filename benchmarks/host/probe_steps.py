"""Run a training program unmodified with a host-speed probe after every optimizer step, so that a host-bound step can
be compared with the simulation at the host speed it ran at.

    python -m benchmarks.host.probe_steps OUT SCRIPT ARGS...
    torchrun ... -m benchmarks.host.probe_steps OUT SCRIPT ARGS...      # each rank writes OUT.rank<R>.json

After each optimizer step (PyTorch's global optimizer step hook, which every framework's optimizer reaches through
the torch optimizer it wraps) the rank runs the ground truth's probe, a fixed pure-Python loop
(benchmarks/workloads/timeline.py, `python_loop_probe_us`). `OUT.rank<R>.json` holds each step's host time, optimizer
step to optimizer step with the probe left out (`step_host_s`; in a host-bound program the step time), and the probes.
The program's own step times include the probe; read `step_host_s` instead.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from typing import Callable


def run_as_main(script: str, args: list[str]) -> None:
    """Run a training script as `python SCRIPT ARGS` would, in this process; SCRIPT `-m` runs the module ARGS[0] with
    the rest, as `python -m MODULE ARGS` would (TorchTitan's `-m torchtitan.train`)."""
    if script == "-m":
        sys.argv = list(args)
        runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        return
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def on_each_optimizer_step(call: Callable[[], None]) -> None:
    """Call `call()` after each optimizer step through PyTorch's global step hooks, once per step: an optimizer that
    steps others (TorchTitan's `OptimizersContainer`, itself a torch `Optimizer`, steps its AdamW) is one step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    depth = [0]

    def enter(optimizer, args, kwargs) -> None:
        depth[0] += 1

    def leave(optimizer, args, kwargs) -> None:
        depth[0] -= 1
        if depth[0] == 0:
            call()

    register_optimizer_step_pre_hook(enter)
    register_optimizer_step_post_hook(leave)


def main() -> None:
    out, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    from benchmarks.workloads.timeline import python_loop_probe_us

    rank = os.environ.get("RANK", "0")
    probes: list[float] = []
    step_host_s: list[float] = []
    last: list[float | None] = [None]

    def after_step() -> None:
        now = time.perf_counter()
        if last[0] is not None:
            step_host_s.append(now - last[0])
        probes.append(python_loop_probe_us())
        last[0] = time.perf_counter()

    on_each_optimizer_step(after_step)
    try:
        run_as_main(script, args)
    finally:
        with open(f"{out}.rank{rank}.json", "w") as f:
            json.dump({"optimizer_steps": len(probes), "step_host_s": step_host_s, "python_loop_probe_us": probes}, f)


if __name__ == "__main__":
    main()
