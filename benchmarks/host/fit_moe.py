"""Fit the host cost of functional all-to-alls, of ops on their not-yet-waited results and of advanced indexing
(models/host.py `all_to_all_extra_ns`, `async_collective_op_ns`, `async_collective_per_output_ns`,
`index_extra_ns`) in situ, on moe_ep4's forward.

Real side: the layer timelines of moe_ep4 with marks inside each MoE layer (benchmarks/workloads/moe_a2a.py;
data/h200/e2e/timelines/runs/{2026-11-22-28,2026-11-22-35}/). Each stretch between two marks is taken as each
rank's median over steps and layers, averaged over the ranks. The forward is host-bound there (the GPU waits for
the host at every mark), so a stretch is host time. Each lease ran slower than the average lease (the first one's
hosts were contended in 85 % of the probes): every real stretch is divided by its lease's index
(benchmarks/host/leases.py), then the two leases averaged. The second lease's layers have one mark more (after the
counts' cat), so its `moe.tolist` stretch is shorter than the first's; that stretch is printed, not fitted.

Simulated side: the same command under Phantora with every rank at the mean host (`--host-contention none
--host-time-scale` the contended hosts' mean factor), its own timeline. As a check, the stretches made of plain ops
whose costs were fitted elsewhere (the argsort, `radix_sort_pass_ns`; the expert FFNs, GEMMs of new shapes,
`gemm_select_ns`) are printed against the simulation. Then:

- all-to-all: the counts', the dispatch's and the combine's all-to-alls, mean; `all_to_all_extra_ns` moves by
  the difference;
- ops on an AsyncCollectiveTensor: each expert's cat of its chunks waits on `world` of them, the weighting's
  multiplication on one (beside an index, a cast and a multiplication charged as fitted); they imply 154 and
  190 µs per op (printed): more waits do not cost more, so the constant is their mean and a wait costs
  nothing apart. The dispatch's split of the received rows into one chunk per (source rank, local expert)
  wraps `experts` outputs: the cost per output it wraps;
- advanced indexing: the token gather `x[token]`; `index_extra_ns` moves by the difference.

Every real stretch ends with a mark, which records a new CUDA event: host time the simulation does not charge
(it charges event records nothing). The stretch that holds almost nothing else (`moe.splits`: a few list
comprehensions, ~1 µs of Python) measures it: ~33 µs at the mean host (31-35 µs raw on two leases; in a tight
loop on an uncontended lease a mark costs 8.4 µs, an `x + 1` 7.9: data/h200/host/marks/event_record/). It is taken
off every real stretch before the differences. data/h200/host/marks/in_situ/ timed a mark's cost directly, from
marked and unmarked steps of one run (benchmarks/host/mark_cost.py): 43-47 µs of step time on 2 ranks; on 4 ranks
whole runs suggest 8-28. The moe.splits estimate stands between them.

The layer's end (zeros_like, index_add, a cast, the residual add) is printed as a check. The four constants go to
src/phantora/specs/<gpu>/host.json (benchmarks/common/fitted.py); a rerun from them prints differences near zero.

    python -m benchmarks.host.fit_moe [--specs DIR]     # one simulation, about a minute on two cores
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, data_dir, relative
from benchmarks.host import leases
from benchmarks.e2e.compare_timeline import load_intervals
from benchmarks.host.fit_dtensor import timeline_at_mean_host
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value

GPU = "h200"
TIMELINES = data_dir(GPU, "e2e", "timelines", "runs")
REAL = [TIMELINES / "2026-11-22-28" / "moe_ep4_routed", TIMELINES / "2026-11-22-35" / "moe_ep4"]
WORLD, EXPERTS = 4, 8
MOE = ["--dim", "2048", "--ffn-dim", "4096", "--experts", str(EXPERTS), "--top-k", "2", "--n-layers", "8",
       "--tokens", "8192", "--steps", "8"]
REFERENCE = ("moe.sort", "moe.expert_ffn")
ALL_TO_ALLS = ("moe.count_a2a", "moe.dispatch_a2a", "moe.combine")
INSTRUMENT = "moe.splits"
"""A stretch of a few list comprehensions (~1 µs of Python on the H200 host) and the mark that ends it."""


def stretches(directory: Path, scale: float = 1.0) -> dict[str, float]:
    """Mark name -> µs since the previous mark: each rank's median over its steps and occurrences, averaged over
    the ranks, times `scale`."""
    samples: dict[str, list[float]] = {}
    for rank in range(WORLD):
        for name, (_, each, _) in load_intervals(directory, rank).items():
            samples.setdefault(name, []).append(each)
    return {name: scale * statistics.fmean(values) for name, values in samples.items()}


def at_average_lease(directories: list[Path]) -> dict[str, float]:
    """The real stretches of each timeline over its lease's index (benchmarks/host/leases.py), averaged over them."""
    each = [stretches(d, leases.average_lease_scale(leases.lease_of_path(str(d)))) for d in directories]
    return {name: statistics.fmean(s[name] for s in each) for name in set.intersection(*(set(s) for s in each))}


def simulate(out: str) -> dict[str, float]:
    return stretches(Path(timeline_at_mean_host("moe_a2a.py", WORLD, MOE, out)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = p.parse_args()
    real = at_average_lease(REAL)
    with tempfile.TemporaryDirectory() as out:
        sim = simulate(out)
    check = sum(real[n] for n in REFERENCE) / sum(sim[n] for n in REFERENCE)
    print(f"check, stretches of plain ops fitted elsewhere ({', '.join(REFERENCE)}): real / simulated = {check:.3f}")
    print(f"{'stretch to mark':20} {'real, average lease':>20} {'simulated':>10}  (µs)")
    for name in sorted(sim, key=lambda n: n.split("#")[0]):
        if name.startswith("moe."):
            print(f"{name:20} {real.get(name, float('nan')):20.0f} {sim[name]:10.0f}")
    mark = real[INSTRUMENT] - sim[INSTRUMENT]
    print(f"a mark's own host time (from {INSTRUMENT}: the mark and ~1 µs of Python), real - simulated: {mark:.1f} µs")

    def missing(name: str) -> float:
        """µs the simulation lacks in stretch `name` at the mean host, less the mark that ends it."""
        return real[name] - sim[name] - mark

    c = H200_HOST
    a2a = statistics.fmean(missing(n) for n in ALL_TO_ALLS)
    # what an op on an AsyncCollectiveTensor costs, implied by each stretch: the charge now plus what is missing
    cats = c.async_collective_op_ns / 1e3 + missing("moe.expert_cat")  # a cat that waits on WORLD chunks
    weighting = c.async_collective_op_ns / 1e3 + missing("moe.weight")  # waits on 1 (with an index, a cast, a mul)
    split = c.async_collective_op_ns / 1e3 + EXPERTS * c.async_collective_per_output_ns / 1e3 + missing("moe.dispatch")
    base = statistics.fmean((cats, weighting))
    per_output = (split - base) / EXPERTS
    print(f"an op waiting on {WORLD} chunks: {cats:.0f} µs; on 1: {weighting:.0f} µs (a wait adds "
          f"{(cats - weighting) / (WORLD - 1):.1f} µs: not fitted); a split wrapping {EXPERTS}: {split:.0f} µs")
    print(f"all_to_all_extra_ns = {c.all_to_all_extra_ns / 1e3 + a2a:.1f} µs (now {c.all_to_all_extra_ns / 1e3:.1f})")
    print(f"async_collective_op_ns = {base:.1f} µs (now {c.async_collective_op_ns / 1e3:.1f}), "
          f"async_collective_per_output_ns = {per_output:.1f} µs (now {c.async_collective_per_output_ns / 1e3:.1f})")
    print(f"index_extra_ns = {c.index_extra_ns / 1e3 + missing('moe.gather'):.1f} µs (now {c.index_extra_ns / 1e3:.1f})")
    print(f"check, the layer's end: {real['L1.fwd_end'] - mark:.0f} µs at the average lease less the mark, "
          f"{sim['L1.fwd_end']:.0f} simulated")
    fitted_us = {"all_to_all_extra_ns": c.all_to_all_extra_ns / 1e3 + a2a, "async_collective_op_ns": base,
                 "async_collective_per_output_ns": per_output,
                 "index_extra_ns": c.index_extra_ns / 1e3 + missing("moe.gather")}
    constants = {name: int(round(us * 10)) * 100 for name, us in fitted_us.items()}  # to 0.1 µs, in ns
    source = f"benchmarks/host/fit_moe.py on {', '.join(relative(d) for d in REAL)}"
    print(f"wrote {update_fitted(GPU, 'host', constants, dict.fromkeys(constants, source), specs_root=args.specs)}")


if __name__ == "__main__":
    main()
