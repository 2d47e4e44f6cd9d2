"""Step marks: the simulated host time at the end of every `optimizer.step()` (config/steps.py says why).

torch calls a global post hook after the `step()` of every `torch.optim.Optimizer` subclass (Megatron's and
DeepSpeed's optimizers step a torch optimizer inside), so no framework needs its own hook. Each mark is one line
appended to `<out>/rank<N>/steps.jsonl` and flushed, so a run that crashes keeps the steps it made; the file is
emptied when the rank starts, so an earlier run's marks never mix in.

Each mark also carries what the simulator had spent by then: the rank's intercepted ops, its process's CPU time,
and the launcher's (its coordinator's and records' work for every rank, read from /proc where the launcher said
its process id). Their differences between two marks are the simulator's own cost of those steps, free of the
start-up (benchmarks/simulator/per_op_cost.py).
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Callable
from typing import Any, TextIO

from phantora.config.steps import STEPS_FILE, process_cpu_s
from phantora.runtime.bootstrap import LAUNCHER_PID_ENV_VAR
from phantora.runtime.session import Session


class StepMarks:
    """Writes one line per optimizer step; optimizers are numbered in the order they first step."""

    def __init__(self, now_ns: Callable[[], int], ops: Callable[[], int], file: TextIO) -> None:
        self._now_ns = now_ns
        self._ops = ops
        self._file = file
        self._numbers: dict[int, int] = {}

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        number = self._numbers.setdefault(id(optimizer), len(self._numbers))
        mark = {"optimizer": number, "host_ns": self._now_ns(), "ops": self._ops(),
                "simulator_cpu_s": _process_cpu_s(), "launcher_cpu_s": launcher_cpu_s()}
        self._file.write(json.dumps(mark) + "\n")
        self._file.flush()


def _process_cpu_s() -> float:
    """The process's CPU time from the OS (the virtual clock may stand in for `time.process_time`)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def launcher_cpu_s() -> float | None:
    """The launcher process's CPU time, None where it cannot be read (no launcher named in the environment, no
    /proc)."""
    pid = os.environ.get(LAUNCHER_PID_ENV_VAR)
    return None if pid is None else process_cpu_s(pid)


def install_step_marks(session: Session) -> StepMarks:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    path = session.config.rank_dir / STEPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    file = open(path, "w")  # noqa: SIM115 (open for the process's lifetime)
    marks = StepMarks(session.now_ns, session.stats.intercepted_ops, file)
    register_optimizer_step_post_hook(marks)
    return marks
