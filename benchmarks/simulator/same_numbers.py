"""Whether a change to the simulator's hot path left every simulated number as it was.

    python -m benchmarks.simulator.same_numbers --save /tmp/before      # on the code before the change
    python -m benchmarks.simulator.same_numbers --compare /tmp/before   # on the code after it

Runs the workloads of `benchmarks.simulator.per_op_cost` (one rank, `--gpu h200`, with the trace) and keeps what
each run writes (summary.json, the rank's result.json and memory.json, the op logs, trace.json) without the
simulator's own costs (CPU, wall, RSS, how records were batched), plus the program's output. `--compare` runs
them again and names every file that differs: a faster hot path must simulate the same step times, memory
peaks and op counts, bit for bit. Exits 1 if anything differs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common.paths import REPO
from benchmarks.simulator.per_op_cost import WORKLOADS

MEASURED_HERE = {"simulator_wall_s", "simulator_cpu_s", "simulator_peak_rss_gib", "launcher_peak_rss_gib",
                 "simulator_peak_rss_bytes", "simulator_records"}
"""The simulator's own cost on this machine, not simulated numbers."""


def simulated(value: object) -> object:
    if isinstance(value, dict):
        return {k: simulated(v) for k, v in value.items() if k not in MEASURED_HERE}
    if isinstance(value, list):
        return [simulated(v) for v in value]
    return value


def run_outputs(workload: str, steps: int) -> dict[str, object]:
    """What one run of `workload` writes, without the simulator's own costs, and what the program printed."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h200", "--out", out,
                   "--", sys.executable, *WORKLOADS[workload], "--steps", str(steps)]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{workload} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        found: dict[str, object] = {"stdout": done.stdout}
        for path in sorted(Path(out).rglob("*")):
            if path.suffix == ".json":
                found[str(path.relative_to(out))] = simulated(json.loads(path.read_text()))
            elif path.suffix == ".jsonl":
                found[str(path.relative_to(out))] = path.read_text()
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="folder to keep the outputs in")
    group.add_argument("--compare", type=Path, help="folder of outputs kept with --save")
    p.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()
    differs = False
    for workload in args.only.split(","):
        outputs = run_outputs(workload, args.steps)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{workload}.json").write_text(json.dumps(outputs, sort_keys=True))
            print(f"{workload}: kept {len(outputs)} outputs")
            continue
        kept = json.loads((args.compare / f"{workload}.json").read_text())
        changed = sorted(name for name in kept.keys() | outputs.keys() if kept.get(name) != outputs.get(name))
        differs |= bool(changed)
        print(f"{workload}: {'differs in ' + ', '.join(changed) if changed else 'the same'}")
    sys.exit(1 if differs else 0)


if __name__ == "__main__":
    main()
