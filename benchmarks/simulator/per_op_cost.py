"""The simulator's own cost per intercepted op: CPU time of `phantora run` per op of the program, and its start-up.

    python -m benchmarks.simulator.per_op_cost                    # the three workloads, 4 and 40 steps each
    python -m benchmarks.simulator.per_op_cost --only nanogpt --steps 4,30

Each workload runs twice under `phantora run --gpu h200` (one rank), with a few steps and with more. The rank's
**marginal cost per op** is read inside the long run: each step mark (config/steps.py) carries the ops the rank
had intercepted and its process's CPU time, and the cost is their growth from the end of step FEW to the last step
(µs of CPU per intercepted op: FakeTensorMode's propagation, Phantora's recording, costing and transport), free of
the start-up (interpreter and torch import, shim install, model construction), whose CPU moves by a second between
runs of the same code on this machine: the difference of two whole runs, which this benchmark took before, carried
that noise into the cost (tens of µs per op). The launcher's (coordinator, records) cost per op is read the same
way from the launcher's CPU time that each mark also carries (where the marks lack it: the difference of its CPU
between the two runs over the difference of their ops). **Start-up** is what the short run's whole CPU
leaves over its ops at the marginal cost. Each step count runs `--repeat` times and the run with the least CPU
counts (other processes on a shared machine only add to it). The workloads:

- `nanogpt`: examples/nanogpt_train.py, GPT-2 124M (GPU-bound shapes; what README.md runs);
- `llama_tiny`: benchmarks/workloads/llama_train.py at 512 wide, 4 layers (host-bound: many small ops);
- `hf_llama`: examples/hf_llama_loop.py, a Hugging Face Llama (the framework path: modules, autocast, SDPA).

Writes data/simulator/per_op_cost/<name>.json (runs and results, with the machine) and its meta.json; prints a
table. Runs are sequential; the numbers are this machine's (CPU model in the output).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from benchmarks.common.env import cpu_model, write_meta
from benchmarks.common.paths import REPO
from phantora.config.steps import STEPS_FILE

WORKLOADS: dict[str, list[str]] = {
    "nanogpt": ["examples/nanogpt_train.py"],
    "llama_tiny": ["benchmarks/workloads/llama_train.py", "--parallel", "none", "--ac", "none", "--dim", "512",
                   "--n-layers", "4", "--n-heads", "8", "--n-kv-heads", "4", "--ffn-dim", "1536", "--vocab", "32000",
                   "--seq", "512", "--batch", "2"],
    "hf_llama": ["examples/hf_llama_loop.py"],
}
"""Workload -> the program and its arguments (`--steps N` is added)."""


class Mark(NamedTuple):
    ops: int
    rank_cpu_s: float
    launcher_cpu_s: float | None


@dataclass(frozen=True)
class Run:
    steps: int
    ops: int
    cpu_s: float
    launcher_cpu_s: float
    wall_s: float
    marks: tuple[Mark, ...]
    """Rank 0's marks at the end of each optimizer step."""


@dataclass(frozen=True)
class Cost:
    workload: str
    runs: tuple[Run, Run]
    rank_us_per_op: float
    launcher_us_per_op: float
    us_per_op: float
    startup_cpu_s: float


def simulate(program: list[str], steps: int) -> Run:
    """One `phantora run` of the program for `steps` steps: its ops, the simulator's CPU and wall time, and rank 0's
    step marks."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h200", "--out", out, "--no-trace",
                   "--", sys.executable, *program, "--steps", str(steps)]
        start = time.monotonic()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(program)} --steps {steps} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
        rank = json.loads((Path(out) / "rank0" / "result.json").read_text())
        lines = (Path(out) / "rank0" / STEPS_FILE).read_text().splitlines()
    marks = tuple(Mark(m["ops"], m["simulator_cpu_s"], m.get("launcher_cpu_s")) for m in map(json.loads, lines)
                  if m["optimizer"] == 0)
    ops = summary["kernels"] + summary["host_only_ops"] + summary["subclass_ops"]
    return Run(steps=steps, ops=ops, cpu_s=summary["simulator_cpu_s"],
               launcher_cpu_s=round(summary["simulator_cpu_s"] - rank["simulator_cpu_s"], 3), wall_s=round(wall, 2),
               marks=marks)


def least_cpu(program: list[str], steps: int, repeat: int) -> Run:
    """The run of `repeat` that took the least CPU: other processes on a shared machine only add to it."""
    return min((simulate(program, steps) for _ in range(repeat)), key=lambda run: run.cpu_s)


def cost_per_op_s(run: Run, after_step: int, cpu: str) -> float | None:
    """CPU per intercepted op (`cpu`: a Mark field, the rank's or the launcher's) from the end of step `after_step`
    to the last step; None where the marks lack it."""
    first, last = run.marks[after_step - 1], run.marks[-1]
    if getattr(first, cpu) is None or getattr(last, cpu) is None:
        return None
    return (getattr(last, cpu) - getattr(first, cpu)) / (last.ops - first.ops)


def measure(workload: str, few: int, many: int, repeat: int) -> Cost:
    first, second = least_cpu(WORKLOADS[workload], few, repeat), least_cpu(WORKLOADS[workload], many, repeat)
    rank_s = cost_per_op_s(second, few, "rank_cpu_s")
    launcher_s = cost_per_op_s(second, few, "launcher_cpu_s")
    if launcher_s is None:  # no launcher CPU in the marks: the two runs' difference, start-up noise and all
        launcher_s = (second.launcher_cpu_s - first.launcher_cpu_s) / (second.ops - first.ops)
    per_op_s = rank_s + launcher_s
    return Cost(workload, (first, second), round(rank_s * 1e6, 1), round(launcher_s * 1e6, 1),
                round(per_op_s * 1e6, 1), round(first.cpu_s - per_op_s * first.ops, 2))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    p.add_argument("--steps", default="4,40", help="the two step counts, FEW,MANY (the workloads time steps after 3; "
                   "more steps between them, less noise from other processes on the machine)")
    p.add_argument("--repeat", type=int, default=2, help="runs of each step count; the least CPU counts")
    p.add_argument("--name", default="per_op_cost", help="data/simulator/per_op_cost/<name>.json")
    args = p.parse_args()
    few, many = (int(n) for n in args.steps.split(","))
    if not 0 < few < many:
        raise SystemExit("--steps: two step counts, the first smaller")
    costs = []
    print(f"{'workload':<12}{'ops (few / many)':>20}{'CPU s':>16}{'µs per op':>11}{'(rank + launcher)':>19}"
          f"{'start-up CPU s':>16}")
    for workload in args.only.split(","):
        cost = measure(workload, few, many, args.repeat)
        costs.append(cost)
        a, b = cost.runs
        print(f"{workload:<12}{f'{a.ops} / {b.ops}':>20}{f'{a.cpu_s:.1f} / {b.cpu_s:.1f}':>16}"
              f"{cost.us_per_op:>11.1f}{f'{cost.rank_us_per_op:.1f} + {cost.launcher_us_per_op:.1f}':>19}"
              f"{cost.startup_cpu_s:>16.2f}", flush=True)
    out = REPO / "data" / "simulator" / "per_op_cost"
    out.mkdir(parents=True, exist_ok=True)
    result = {"what": "simulator CPU per intercepted op and start-up, one rank, --gpu h200",
              "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version()},
              "steps": [few, many], "repeat": args.repeat, "costs": [asdict(c) for c in costs]}
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    write_meta(out, __file__)
    print(f"wrote {out / (args.name + '.json')}")


if __name__ == "__main__":
    main()
