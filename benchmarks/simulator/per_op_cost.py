"""The simulator's own cost per intercepted op: CPU time of `phantora run` per op of the program, and its start-up.

    python -m benchmarks.simulator.per_op_cost                    # the three workloads, 4 and 40 steps each
    python -m benchmarks.simulator.per_op_cost --only nanogpt --steps 4,30

Each workload runs twice under `phantora run --gpu h200` (one rank), with a few steps and with more. The op
counts (summary.json: kernels, host-only ops, subclass ops) and the CPU time of the launcher and the rank
(`simulator_cpu_s`) grow with the steps; their differences give the **marginal cost per op** (µs of simulator CPU
per intercepted op: FakeTensorMode's propagation, Phantora's recording, costing and transport), free of the
fixed start-up (interpreter and torch import, shim install, model construction, reports), which is what the
first run leaves over: **start-up** = its CPU less its ops at the marginal cost. Each step count runs `--repeat`
times and the run with the least CPU counts (other processes on a shared machine only add to it). The second run
is long (40 steps) because the difference carries the noise of both runs: with 20, the Hugging Face Llama's
~10,000 ops between them moved its cost by tens of µs between runs of the same code. The workloads:

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

from benchmarks.common.env import cpu_model, write_meta
from benchmarks.common.paths import REPO

WORKLOADS: dict[str, list[str]] = {
    "nanogpt": ["examples/nanogpt_train.py"],
    "llama_tiny": ["benchmarks/workloads/llama_train.py", "--parallel", "none", "--ac", "none", "--dim", "512",
                   "--n-layers", "4", "--n-heads", "8", "--n-kv-heads", "4", "--ffn-dim", "1536", "--vocab", "32000",
                   "--seq", "512", "--batch", "2"],
    "hf_llama": ["examples/hf_llama_loop.py"],
}
"""Workload -> the program and its arguments (`--steps N` is added)."""


@dataclass(frozen=True)
class Run:
    steps: int
    ops: int
    cpu_s: float
    wall_s: float


@dataclass(frozen=True)
class Cost:
    workload: str
    runs: tuple[Run, Run]
    us_per_op: float
    startup_cpu_s: float


def simulate(program: list[str], steps: int) -> Run:
    """One `phantora run` of the program for `steps` steps: its ops and the simulator's CPU and wall time."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h200", "--out", out, "--no-trace",
                   "--", sys.executable, *program, "--steps", str(steps)]
        start = time.monotonic()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(program)} --steps {steps} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    ops = summary["kernels"] + summary["host_only_ops"] + summary["subclass_ops"]
    return Run(steps=steps, ops=ops, cpu_s=summary["simulator_cpu_s"], wall_s=round(wall, 2))


def least_cpu(program: list[str], steps: int, repeat: int) -> Run:
    """The run of `repeat` that took the least CPU: other processes on a shared machine only add to it."""
    return min((simulate(program, steps) for _ in range(repeat)), key=lambda run: run.cpu_s)


def measure(workload: str, few: int, many: int, repeat: int) -> Cost:
    first, second = least_cpu(WORKLOADS[workload], few, repeat), least_cpu(WORKLOADS[workload], many, repeat)
    per_op_s = (second.cpu_s - first.cpu_s) / (second.ops - first.ops)
    return Cost(workload, (first, second), round(per_op_s * 1e6, 1), round(first.cpu_s - per_op_s * first.ops, 2))


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
    print(f"{'workload':<12}{'ops (few / many)':>20}{'CPU s':>16}{'µs per op':>11}{'start-up CPU s':>16}")
    for workload in args.only.split(","):
        cost = measure(workload, few, many, args.repeat)
        costs.append(cost)
        a, b = cost.runs
        print(f"{workload:<12}{f'{a.ops} / {b.ops}':>20}{f'{a.cpu_s:.1f} / {b.cpu_s:.1f}':>16}"
              f"{cost.us_per_op:>11.1f}{cost.startup_cpu_s:>16.2f}", flush=True)
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
