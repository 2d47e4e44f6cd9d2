"""Line up the layer-by-layer timeline of a real training step with Phantora's (benchmarks/workloads/timeline.py).

Both sides are directories of rank{R}.json written with PHANTORA_BENCH_TIMELINE=DIR (real:
`benchmarks/e2e/profile_steps.py --timeline`; simulated: the same workload under `phantora torchrun`).
For each mark, in step order, prints the median over steps of its host time and its GPU time (µs from
the step's start) on both sides, and how far the GPU lags behind the host there (GPU - host: near zero
means the GPU waits for the host). A label seen twice in a step (an FSDP2 group unshard in forward and
backward) gets a #2 suffix.

    python -m benchmarks.e2e.compare_timeline data/h200/e2e/timelines/llama_l1b_fsdp4 /tmp/tl/llama_l1b_fsdp4 [--rank 0]

With --intervals, prints instead, per mark name (occurrences pooled), the host time from the previous
mark to it, summed over a step (median over steps) and per occurrence (median): which stretch of
a repeated layer the simulated host is short or long on.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path


def load_marks(directory: Path, rank: int) -> dict[str, tuple[float, float]]:
    """Label -> (median host µs, median GPU µs) over the recorded steps, labels made unique per step."""
    steps = json.loads((directory / f"rank{rank}.json").read_text())["steps"]
    samples: dict[str, list[tuple[float, float]]] = {}
    for step in steps:
        seen: Counter[str] = Counter()
        for label, host_us, gpu_us in step:
            seen[label] += 1
            key = label if seen[label] == 1 else f"{label}#{seen[label]}"
            samples.setdefault(key, []).append((host_us, gpu_us))
    return {key: (statistics.median(h for h, _ in vals), statistics.median(g for _, g in vals))
            for key, vals in samples.items()}


def load_intervals(directory: Path, rank: int) -> dict[str, tuple[float, float, int]]:
    """Mark name -> (median over steps of the host µs since the previous mark, summed over the step's
    occurrences; median µs per occurrence; occurrences per step)."""
    steps = json.loads((directory / f"rank{rank}.json").read_text())["steps"]
    per_step: list[dict[str, list[float]]] = []
    for step in steps:
        gaps: dict[str, list[float]] = {}
        for (_, before, _), (label, host_us, _) in zip(step, step[1:]):
            gaps.setdefault(label, []).append(host_us - before)
        per_step.append(gaps)
    names = {name for gaps in per_step for name in gaps}
    return {name: (statistics.median(sum(g.get(name, [])) for g in per_step),
                   statistics.median(x for g in per_step for x in g.get(name, [])),
                   round(statistics.median(len(g.get(name, [])) for g in per_step)))
            for name in names}


def print_intervals(real_dir: Path, sim_dir: Path, rank: int) -> None:
    real, sim = load_intervals(real_dir, rank), load_intervals(sim_dir, rank)
    nan = (float("nan"), float("nan"), 0)
    print(f"{'to mark':24} {'n':>3} {'per step real':>13} {'sim':>8} {'each real':>10} {'sim':>8}  (ms; host time since the previous mark)")
    for name in sorted(set(real) | set(sim), key=lambda n: -real.get(n, nan)[0]):
        (rs, re_, n), (ss, se, _) = real.get(name, nan), sim.get(name, nan)
        print(f"{name:24} {n:3d} {rs / 1e3:13.2f} {ss / 1e3:8.2f} {re_ / 1e3:10.3f} {se / 1e3:8.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("real", type=Path)
    p.add_argument("sim", type=Path)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--all", action="store_true", help="also the FSDP2 copy-in and all-gather marks")
    p.add_argument("--intervals", action="store_true", help="host time between marks, pooled per mark name")
    a = p.parse_args()
    if a.intervals:
        print_intervals(a.real, a.sim, a.rank)
        return 0
    real, sim = load_marks(a.real, a.rank), load_marks(a.sim, a.rank)
    print(f"{'mark':32} {'host real':>10} {'sim':>9} {'GPU real':>10} {'sim':>9} {'lag real':>9} {'sim':>8}  (ms)")
    for label, (rh, rg) in sorted(real.items(), key=lambda kv: (kv[1][1], kv[1][0])):
        if not a.all and label.split("#")[0].endswith(("copy_in_done", "all_gather_done")):
            continue
        sh, sg = sim.get(label, (float("nan"), float("nan")))
        print(f"{label:32} {rh / 1e3:10.2f} {sh / 1e3:9.2f} {rg / 1e3:10.2f} {sg / 1e3:9.2f} "
              f"{(rg - rh) / 1e3:9.2f} {(sg - sh) / 1e3:8.2f}")
    missing = sorted(set(sim) - set(real))
    if missing:
        print("only simulated:", ", ".join(missing))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
