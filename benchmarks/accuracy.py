"""Accuracy benchmark: Phantora's predictions against real H200 runs.

For every single-process configuration of the dev set (`data/reference/h200x4_dev_set.json`,
measured on real H200s) it runs the same script under `phantora run`, reads the script's own
JSON result line (its median step time and peak memory, in simulated time), and prints
measured vs predicted with the error, plus the simulator's own cost.

    python benchmarks/accuracy.py                 # all single-GPU configs
    python benchmarks/accuracy.py --no-kernel-db  # analytic cost model only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV_SET = REPO / "data" / "reference" / "h200x4_dev_set.json"
WORKLOADS = REPO / "benchmarks" / "workloads"


def script_args(config: dict) -> list[str]:
    args = []
    for key, value in config["args"].items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def run_config(config: dict, *, steps: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h200", "--out", out, *extra, "--",
                   "python", str(WORKLOADS / config["script"]), *script_args(config), "--steps", str(steps)]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"{config['name']}: phantora failed:\n{done.stderr[-3000:]}")
        result = next(json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"script"'))
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"result": result, "summary": summary, "wall_s": wall}


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="steps per run (the script's median skips 3)")
    parser.add_argument("--no-kernel-db", action="store_true", help="analytic compute model only")
    parser.add_argument("--all", action="store_true", help="also multi-GPU configs (needs issue 3)")
    args = parser.parse_args()
    dev_set = json.loads(DEV_SET.read_text())
    configs = [c for c in dev_set["configs"] if args.all or c["world"] == 1]
    extra = ["--no-kernel-db"] if args.no_kernel_db else []
    rows = []
    for config in configs:
        run = run_config(config, steps=args.steps, extra=extra)
        r = run["result"]
        rows.append({
            "name": config["name"],
            "step_ms": (config["step_ms"], 1e3 * r["step_s_median"]),
            "reserved_gib": (config["max_mem_reserved_gib"], r["max_mem_reserved_gib"]),
            "allocated_gib": (config["max_mem_allocated_gib"], r["max_mem_alloc_gib"]),
            "wall_s_per_step": run["wall_s"] / args.steps,
            "rss_gib": run["summary"]["simulator_peak_rss_gib"],
            "generic_ops": run["summary"]["generic_ops"],
        })
    print(f"hardware: {dev_set['hardware']}")
    print(f"cost model: {'analytic only' if args.no_kernel_db else 'measured database + analytic'}")
    header = f"{'config':<18} {'step ms meas':>12} {'pred':>8} {'err %':>7}   {'reserved GiB meas':>17} {'pred':>7} " \
             f"{'err %':>7}   {'alloc err %':>11}   {'sim s/step':>10} {'RSS GiB':>7}"
    print(header)
    print("-" * len(header))
    step_errors, mem_errors = [], []
    for row in rows:
        (ms, ps), (mr, pr), (ma, pa) = row["step_ms"], row["reserved_gib"], row["allocated_gib"]
        step_errors.append(error_pct(ps, ms))
        mem_errors.append(error_pct(pr, mr))
        print(f"{row['name']:<18} {ms:>12.1f} {ps:>8.1f} {step_errors[-1]:>+7.1f}   {mr:>17.2f} {pr:>7.2f} "
              f"{mem_errors[-1]:>+7.1f}   {error_pct(pa, ma):>+11.1f}   {row['wall_s_per_step']:>10.2f} "
              f"{row['rss_gib']:>7.2f}")
        if row["generic_ops"]:
            print(f"{'':<18} unmodelled ops: {row['generic_ops']}")
    mean = lambda xs: sum(abs(x) for x in xs) / len(xs)  # noqa: E731
    print("-" * len(header))
    print(f"step time |error|: mean {mean(step_errors):.1f} %, max {max(abs(e) for e in step_errors):.1f} %;  "
          f"peak reserved |error|: mean {mean(mem_errors):.1f} %, max {max(abs(e) for e in mem_errors):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
