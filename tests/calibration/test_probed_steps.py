"""Framework programs run with a host-speed probe each step (benchmarks/host/probe_steps.py), and what the probed
comparison reads from them (benchmarks/e2e/frameworks/probed.py)."""

import json
import subprocess
import sys

from benchmarks.common.paths import REPO
from benchmarks.e2e.frameworks import probed

PROGRAM = """
import json, sys, time, torch
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
slept = []
for step in range(5):
    model(torch.ones(2, 4)).sum().backward()
    start = time.perf_counter()
    time.sleep(0.02 * step)  # the program's own host time grows step by step
    slept.append(time.perf_counter() - start)  # a loaded machine oversleeps
    optimizer.step()
    optimizer.zero_grad()
json.dump(slept, open(sys.argv[1], "w"))
"""


def run_probed(tmp_path, program: str, *args: str) -> dict:
    """Run `program` under benchmarks/host/probe_steps.py; its rank's record."""
    script = tmp_path / "train.py"
    script.write_text(program)
    subprocess.run([sys.executable, "-m", "benchmarks.host.probe_steps", str(tmp_path / "run"), str(script), *args],
                   cwd=REPO, check=True, timeout=120)
    return json.loads((tmp_path / "run.rank0.json").read_text())


def test_each_steps_host_time_leaves_the_probe_out(tmp_path):
    record = run_probed(tmp_path, PROGRAM, str(tmp_path / "slept.json"))
    assert record["optimizer_steps"] == 5 and len(record["python_loop_probe_us"]) == 5
    steps = record["step_host_s"]  # from the first optimizer step on: four steps, 20-80 ms of sleep each
    assert len(steps) == 4
    slept = json.loads((tmp_path / "slept.json").read_text())[1:]
    probes_s = [us / 1e6 for us in record["python_loop_probe_us"][1:]]  # each taken right after its step, as loaded
    for seconds, sleep, probe_s in zip(steps, slept, probes_s):
        assert sleep <= seconds < sleep + probe_s  # the probe would push it past


def test_the_host_scale_is_the_slowest_ranks(monkeypatch):
    monkeypatch.setattr(probed, "uncontended_probe_us", lambda: 5000.0)
    assert probed.host_scale([[5000, 5500, 6000], [9000, 10000, 11000]]) == 2.0
    assert probed.at_host_scale(2.0) == ("--host-contention", "none", "--host-time-scale", "2.000")


CONTAINER_PROGRAM = """
import torch
model = torch.nn.Linear(4, 4)

class Container(torch.optim.Optimizer):  # TorchTitan's OptimizersContainer: an Optimizer that steps others
    def __init__(self, inner):
        self.inner = inner
        super().__init__(model.parameters(), {})

    def step(self, closure=None):
        self.inner.step()

optimizer = Container(torch.optim.SGD(model.parameters(), lr=0.1))
for step in range(3):
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
"""


def test_an_optimizer_that_steps_others_is_one_step(tmp_path):
    record = run_probed(tmp_path, CONTAINER_PROGRAM)
    assert record["optimizer_steps"] == 3 and len(record["step_host_s"]) == 2
