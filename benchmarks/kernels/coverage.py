"""Record the op signatures of every accuracy-benchmark configuration, and say how much of each is
covered by the shipped H200 kernel database.

Each configuration of `benchmarks/e2e/configs.json` is simulated briefly (4 steps where every step
runs the same shapes) and its `ops.jsonl` is kept in OUT/ops/NAME.jsonl. `phantora profile OUT/ops --only-missing` on an H200 then
measures what the database lacks (`benchmarks/common/run_subject.sh kernels coverage_missing`). The table printed at the end gives, per
configuration, its signatures and the share of its simulated kernel time (calls x estimate) that each
cost source (measured database, analytic model, generic estimate) provides.

    python -m benchmarks.kernels.coverage --out data/h200/e2e/coverage        # all configurations
    python -m benchmarks.kernels.coverage --out /tmp/cov --only moe_ep4   # some
    python -m benchmarks.kernels.coverage --out data/h200/e2e/coverage --table-only
    python -m benchmarks.kernels.coverage --out data/h200/e2e/coverage --table-only --measured data/h200/kernels/micro/coverage_missing/coverage_kernels.jsonl

With `--measured DB`, the ops that the simulations costed with the analytic model and DB has measured
since are an out-of-sample test of that model: per kernel class, the estimate recorded in the ops files
(the model as it was when they were written) against the measurement plus the same inter-kernel gaps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.e2e import accuracy

from phantora.models.compute import Calibration, KernelDatabase, classify
from phantora.profiler.oplog import merge_ops, read_ops
from phantora.specs import load_profile

SHORT_STEPS = 4
"""Steps simulated for a configuration of fixed shapes: the scripts report the median of the steps
after 3 warm-up steps, so they need 4; every op signature occurs in each step. (Fewer layers would
keep most signatures but not the optimizer's and `clip_grad_norm_`'s foreach ops over all parameters.)"""
VARYING_SHAPES = frozenset({"moe_a2a.py"})
"""Scripts whose shapes change from step to step (the MoE experts' row counts are drawn per layer and
step, and each draw is a signature): they run all their steps."""


def steps_to_simulate(config: dict) -> int:
    args = config["args"]
    if config["script"] in VARYING_SHAPES and config["steps_flag"] in args:
        return int(args[args.index(config["steps_flag"]) + 1])
    return SHORT_STEPS


def record(config: dict, dest: Path) -> float:
    """Simulate `config` briefly and copy its merged ops file to `dest`; the wall time in seconds."""
    accuracy.ensure_torchtitan_data(config)
    with tempfile.TemporaryDirectory() as out:
        command = accuracy.phantora_command(config, out, steps_to_simulate(config), ["--no-trace", "--no-progress"])
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=accuracy.REPO)
        if done.returncode != 0:
            raise RuntimeError(f"{config['name']}: phantora failed:\n{done.stderr[-2000:]}")
        dest.write_text((Path(out) / "ops.jsonl").read_text())
    return time.monotonic() - started


def coverage(path: Path) -> dict:
    """Signatures and estimated kernel time (calls x estimate) of one ops file, by cost source."""
    sigs: dict[str, int] = defaultdict(int)
    time_ns: dict[str, float] = defaultdict(float)
    for rec in read_ops(path).records.values():
        sigs[rec["source"]] += 1
        time_ns[rec["source"]] += rec["calls"] * rec["est_ns"]
    return {"signatures": dict(sigs), "time_ns": dict(time_ns)}


def print_table(ops_dir: Path) -> None:
    print(f"{'config':<30}{'signatures':>11}{'measured':>10}{'analytic':>10}{'generic':>9}   share of kernel time")
    for path in sorted(ops_dir.glob("*.jsonl")):
        c = coverage(path)
        total = sum(c["time_ns"].values()) or 1.0
        n = c["signatures"]
        shares = "  ".join(f"{src} {100 * c['time_ns'].get(src, 0) / total:5.1f}%" for src in ("measured", "analytic", "generic"))
        print(f"{path.stem:<30}{sum(n.values()):>11}{n.get('measured', 0):>10}{n.get('analytic', 0):>10}"
              f"{n.get('generic', 0):>9}   {shares}")


def print_analytic_error(ops_dir: Path, measured: Path) -> None:
    """Recorded analytic estimates against their later measurements, per kernel class, weighted by calls."""
    records = merge_ops(read_ops(p) for p in sorted(ops_dir.glob("*.jsonl"))).records
    gap_ns = load_profile("h200").calibration.value.kernel_gap_ns
    by_class: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for sig, entry in KernelDatabase.load(measured).entries.items():
        rec = records.get(sig)
        if rec is None or rec["source"] != "analytic":
            continue
        by_class[classify(entry.op) or "other"].append(
            (rec["est_ns"], entry.kernel_ns + gap_ns * entry.n_kernels, rec["calls"]))
    print(f"\nAnalytic estimates of {sum(map(len, by_class.values()))} benchmark signatures vs their measurement"
          f" ({measured})")
    print(f"{'class':<14}{'n':>6}{'median |err|':>14}{'call-weighted':>15}{'measured ms':>13}")
    for cls, rows in sorted(by_class.items(), key=lambda kv: -sum(m * c for _, m, c in kv[1])):
        errs = sorted(abs(e / m - 1) for e, m, _ in rows)
        est, meas = sum(e * c for e, _, c in rows), sum(m * c for _, m, c in rows)
        print(f"{cls:<14}{len(rows):>6}{100 * errs[len(errs) // 2]:>13.1f}%{100 * (est / meas - 1):>+14.1f}%"
              f"{meas / 1e6:>13.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for ops/NAME.jsonl")
    p.add_argument("--only", help="comma-separated configuration names")
    p.add_argument("--table-only", action="store_true", help="print the table of what OUT/ops holds")
    p.add_argument("--measured", type=Path, help="a kernel database measured from OUT/ops: the analytic model's error")
    a = p.parse_args()
    ops_dir = a.out / "ops"
    if not a.table_only:
        ops_dir.mkdir(parents=True, exist_ok=True)
        have_torchrun = accuracy.torchrun_available()
        names = set(a.only.split(",")) if a.only else None
        for config in json.loads(accuracy.CONFIGS.read_text())["configs"]:
            if names is not None and config["name"] not in names:
                continue
            reason = accuracy.skip_reason(config, have_torchrun)
            if reason:
                print(f"{config['name']}: skipped: {reason}", flush=True)
                continue
            wall = record(config, ops_dir / f"{config['name']}.jsonl")
            print(f"{config['name']}: {wall:.0f} s", flush=True)
    print_table(ops_dir)
    if a.measured:
        print_analytic_error(ops_dir, a.measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
