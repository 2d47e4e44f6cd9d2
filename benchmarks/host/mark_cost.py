"""What a timeline mark costs the host in situ: a real run whose recorded steps alternate between no marks and
the usual marks (PHANTORA_BENCH_MARK_AB=1, benchmarks/workloads/timeline.py).

The fits that read host time between marks (fit_moe_host.py, fit_subclass_ops.py) must take each mark's own
host time off the stretch it ends; the simulation charges a mark nothing. In a host-bound phase every mark's
cost lands on the step time, so a marked step minus the mean of the unmarked steps on either side of it (which
cancels the drift of a run whose steps get faster as its GEMM shapes repeat) over the marks it recorded in
its host-bound forward is the cost of one mark there. Prints, per run: steps of each kind, their medians, the
paired difference and the implied µs per forward mark.

    python -m benchmarks.host.mark_cost data/h200/host/marks/in_situ/moe_ep2_r1 [...]
        (a directory holding the run's rank0.json and, beside it, DIR.log with the script's JSON line)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

FORWARD_END = "forward"
"""The mark the workloads record when the forward pass has been issued."""


def step_times_ms(log: Path) -> list[float]:
    """Every step's time, from the JSON line the workload prints at the end."""
    for line in log.read_text().splitlines():
        if "step_s_all" in line:  # under Phantora the line carries a rank prefix
            return [s * 1e3 for s in json.loads(line[line.index("{"):])["step_s_all"]]
    raise SystemExit(f"{log}: no result line with step_s_all")


def forward_marks(steps: list[list]) -> float:
    """Marks recorded before the forward's end per marked step (the opening 'step' record is outside the
    timed step)."""
    counts = [next(i for i, (label, _, _) in enumerate(step) if label == FORWARD_END) for step in steps]
    return statistics.fmean(counts)


def paired_differences(times: list[float], marked: list[int]) -> list[float]:
    """Each marked step minus the mean of its two unmarked neighbours."""
    chosen = set(marked)
    return [times[s] - (times[s - 1] + times[s + 1]) / 2 for s in marked
            if s + 1 < len(times) and s - 1 not in chosen and s + 1 not in chosen]


def report(run: Path) -> tuple[float, float]:
    timeline = json.loads((run / "rank0.json").read_text())
    marked = timeline["marked_steps"]
    times = step_times_ms(run.with_suffix(".log"))
    unmarked = [t for s, t in enumerate(times) if s >= marked[0] - 1 and s not in marked]
    diffs = paired_differences(times, marked)
    marks = forward_marks(timeline["steps"])
    per_mark = statistics.fmean(diffs) * 1e3 / marks
    print(f"{run.name}: {len(marked)} marked steps, median {statistics.median(times[s] for s in marked):.1f} ms; "
          f"{len(unmarked)} unmarked, median {statistics.median(unmarked):.1f} ms; paired difference "
          f"{statistics.fmean(diffs):+.2f} ms (sd {statistics.stdev(diffs):.2f}, n {len(diffs)}); "
          f"{marks:.0f} forward marks: {per_mark:.1f} µs per mark")
    return per_mark, statistics.stdev(diffs) * 1e3 / marks / len(diffs) ** 0.5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, nargs="+")
    estimates = [report(run) for run in p.parse_args().runs]
    if len(estimates) > 1:
        print(f"pooled: {statistics.fmean(e for e, _ in estimates):.1f} µs per forward mark")


if __name__ == "__main__":
    main()
