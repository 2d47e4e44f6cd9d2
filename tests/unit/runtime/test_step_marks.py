"""Step marks: a line per optimizer step at the simulated host clock, optimizers numbered as they first step;
torch's global hook fires for a torch optimizer, as it does inside the frameworks' optimizers."""

from __future__ import annotations

import io
import json

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from phantora.runtime.steps import StepMarks


def test_a_mark_per_step_at_the_host_clock():
    clock = iter([100, 250, 260, 400])
    file = io.StringIO()
    marks = StepMarks(lambda: next(clock), file)
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
    assert lines == [{"optimizer": 0, "host_ns": 100}, {"optimizer": 1, "host_ns": 250},
                     {"optimizer": 0, "host_ns": 260}, {"optimizer": 1, "host_ns": 400}]
