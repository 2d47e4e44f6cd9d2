"""Step marks: a line per optimizer step at the simulated host clock, optimizers numbered as they first step;
torch's global hook fires for a torch optimizer, as it does inside the frameworks' optimizers."""

from __future__ import annotations

import io
import json
import os
import resource

import pytest

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from phantora.runtime.steps import StepMarks


def test_a_mark_per_step_at_the_host_clock():
    clock = iter([100, 250, 260, 400])
    file = io.StringIO()
    ops = iter([10, 20, 30, 40])
    marks = StepMarks(lambda: next(clock), lambda: next(ops), file)
    first, second = torch.optim.SGD([torch.zeros(1, requires_grad=True)]), torch.optim.Adam([torch.zeros(1)])
    handle = register_optimizer_step_post_hook(marks)
    try:
        first.step()
        second.step()
        first.step()
        second.step()
    finally:
        handle.remove()
    lines = [json.loads(line) for line in file.getvalue().splitlines()]
    assert [{k: line[k] for k in ("optimizer", "host_ns", "ops")} for line in lines] == [
        {"optimizer": 0, "host_ns": 100, "ops": 10}, {"optimizer": 1, "host_ns": 250, "ops": 20},
        {"optimizer": 0, "host_ns": 260, "ops": 30}, {"optimizer": 1, "host_ns": 400, "ops": 40}]
    # the process's CPU time by then, from the OS: what the simulator spent (benchmarks/simulator/per_op_cost.py)
    cpu = [line["simulator_cpu_s"] for line in lines]
    assert cpu == sorted(cpu) and cpu[0] > 0


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the launcher's CPU is read from /proc")
def test_a_mark_carries_the_launchers_cpu_where_the_launcher_named_its_process(monkeypatch):
    from phantora.runtime.bootstrap import LAUNCHER_PID_ENV_VAR
    from phantora.runtime.steps import launcher_cpu_s

    monkeypatch.delenv(LAUNCHER_PID_ENV_VAR, raising=False)
    assert launcher_cpu_s() is None
    monkeypatch.setenv(LAUNCHER_PID_ENV_VAR, str(os.getpid()))  # this process stands in for the launcher
    sum(i * i for i in range(300_000))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert launcher_cpu_s() == pytest.approx(usage.ru_utime + usage.ru_stime, abs=0.05)

