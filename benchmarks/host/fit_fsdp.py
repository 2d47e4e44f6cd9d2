"""Fit the host cost of FSDP2's library calls beyond the ops they issue (models/host.py LIBRARY_CALL_NS, FSDP2's
entries, and ACCUMULATING_CALL_NS) at the average lease.

Real side: the 1.5B llama with FSDP2, each wrapped call's exclusive host time recorded
(benchmarks/workloads/host_calls.py), in these runs:

- `llama_l1b_fsdp2`: the ground-truth command (2 GPUs, batch 2); `llama_l1b_fsdp4` the same on 4 GPUs;
- `fsdp2_ga1`, `fsdp2_ga4`: 2 GPUs, batch 1 with one micro-step per step and with four (`--grad-accum 4`: the first
  three keep their gradients, `set_requires_gradient_sync(False)`).

Two x2 leases (data/h200/host/fsdp/runs/<lease>/) ran the three 2-GPU commands beside ground-truth runs, which
give each lease's index (benchmarks/host/leases.py: 0.87 and 1.07). data/h200/host/calls/library/ (the ground-truth
commands, 2 and 4 GPUs) and data/h200/host/fsdp/ (the batch-1 runs) were taken on leases without ground-truth runs;
each of those leases' index is estimated from the same command's calls on the indexed leases (its time over
theirs, times their index). host/calls/library/ holds the only runs on 4 GPUs, where `post_backward` takes ~0.7x
its time on 2.

Simulated side: each command under Phantora with every rank at the mean host, its own call times.

The calls of `ACCUMULATING` names take a lighter path in micro-steps that keep their gradients; a call's
micro-step is its position (`groups` calls per micro-step). Every other call takes one path. Per call and path,
pooled over leases, runs, ranks and steps (means: a step pays every call, the slow ones too):

    new = current + (real µs per step / lease index - simulated µs per step) / simulated calls per step

Writes `library_call_ns` (its FSDP2 entries refitted, the others kept) and `accumulating_call_ns` to
src/phantora/specs/<gpu>/host.json (benchmarks/common/fitted.py).

    python -m benchmarks.host.fit_fsdp [--specs DIR]     # four simulations, about ten minutes on two cores
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, data_dir, relative
from benchmarks.host import leases
from benchmarks.host.fit_dtensor import at_mean_host
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value

GROUPS = 17
"""FSDP2 parameter groups (16 layers and the root)."""
L1B = ["--parallel", "fsdp", "--ac", "none", "--dim", "2048", "--n-layers", "16", "--n-heads", "32", "--n-kv-heads", "8",
       "--ffn-dim", "8192", "--vocab", "128256", "--seq", "4096", "--steps", "8"]
RUNS = {
    "llama_l1b_fsdp2": ([*L1B, "--batch", "2"], 2, 1),
    "llama_l1b_fsdp4": ([*L1B, "--batch", "2"], 4, 1),
    "fsdp2_ga1": ([*L1B, "--batch", "1", "--grad-accum", "1"], 2, 1),
    "fsdp2_ga4": ([*L1B, "--batch", "1", "--grad-accum", "4"], 2, 4),
}
"""Run name -> (llama_train.py arguments, ranks, micro-steps per step)."""
GPU = "h200"
FSDP = data_dir(GPU, "host", "fsdp")
LIBRARY = data_dir(GPU, "host", "calls", "library")
INDEXED = {"2026-11-22-37": FSDP / "runs" / "2026-11-22-37", "2026-11-22-39": FSDP / "runs" / "2026-11-22-39"}
"""Leases with ground-truth runs -> the folder of their runs (each of the 2-GPU commands)."""
ESTIMATED = {"host/calls/library's lease": (LIBRARY, ("llama_l1b_fsdp2", "llama_l1b_fsdp4")),
             "2026-11-22-32": (FSDP, ("fsdp2_ga1", "fsdp2_ga4"))}
"""Leases without -> (folder, their runs); the 2-GPU ones among them give the lease's index."""
FSDP2_SOURCE = f"benchmarks/host/fit_fsdp.py on {relative(FSDP)} and {relative(LIBRARY)} (FSDP2 entries)"
LIBRARY_CALL_SOURCE = (f"{FSDP2_SOURCE}; benchmarks/host/fit_fsdp1.py on {relative(data_dir(GPU, 'host', 'fsdp1'))} "
                       "(FSDP1 entries)")
"""The source of `library_call_ns`, whichever of its two fits wrote it last."""
ACCUMULATING = {"FSDPParamGroup.post_backward": GROUPS, "FSDPState._root_post_backward_final_callback": 1}
"""Calls with a lighter path in a micro-step that keeps its gradients -> calls per micro-step."""

Totals = dict[tuple[str, bool], list[float]]
"""(call, accumulating path) -> [µs per step, calls per step], summed over ranks."""


def call_totals(directory: Path, micro_steps: int, prefixes: tuple[str, ...] = ("FSDP",)) -> Totals:
    """Each call's exclusive host time and count per step, by path, summed over the ranks: the calls whose
    names start with one of `prefixes` (FSDP2's by default)."""
    totals: Totals = {}
    for path in sorted(directory.glob("rank*.json")):
        run = json.loads(path.read_text())
        steps = len(run["phases"])
        for name, times in run["calls"].items():
            if not name.startswith(prefixes):
                continue
            per = ACCUMULATING.get(name)
            for i, us in enumerate(times):
                keeps = per is not None and (i % (per * micro_steps)) // per < micro_steps - 1
                entry = totals.setdefault((name, keeps), [0.0, 0.0])
                entry[0] += us / steps
                entry[1] += 1 / steps
    return totals


def run_us(directory: Path, run: str) -> float:
    """All FSDP2 calls' exclusive host µs per step of the run in `directory` (of RUNS' command `run`), summed over
    its ranks."""
    return sum(us for us, _ in call_totals(directory, RUNS[run][2]).values())


def estimated_index(lease: str, index: dict[str, float], runs: list[tuple[Path, str]]) -> float:
    """The index of a lease without ground-truth runs, from its runs (folder, RUNS' command it ran): their FSDP2
    calls over the same command's on the indexed leases, times those leases' index, averaged; printed."""
    ratios = [index[known] * run_us(directory, run) / run_us(known_folder / run, run)
              for directory, run in runs for known, known_folder in INDEXED.items() if (known_folder / run).is_dir()]
    estimate = statistics.fmean(ratios)
    print(f"{lease}: index estimated {estimate:.3f} (from {', '.join(f'{r:.2f}' for r in ratios)})")
    return estimate


def measured_runs(index: dict[str, float]) -> list[tuple[Path, str, float]]:
    """(folder, run, its lease's index) for every real run; prints the estimated indices."""
    runs = [(folder / run, run, index[lease]) for lease, folder in INDEXED.items() for run in RUNS
            if (folder / run).is_dir()]
    for lease, (folder, names) in ESTIMATED.items():
        estimate = estimated_index(lease, index, [(folder / run, run) for run in names])
        runs += [(folder / run, run, estimate) for run in names]
    return runs


def simulated_totals(name: str, out: str) -> Totals:
    args, world, micro_steps = RUNS[name]
    calls = Path(out) / name / "calls"
    at_mean_host("llama_train.py", world, args, str(Path(out) / name / "run"), PHANTORA_BENCH_HOST_CALLS=str(calls))
    return call_totals(calls, micro_steps)


def current_ns(name: str, keeps: bool) -> int:
    return (H200_HOST.accumulating_call_ns if keeps else H200_HOST.library_call_ns)[name]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = p.parse_args()
    index = leases.lease_index()
    runs = measured_runs(index)
    real_sum: dict[tuple[str, bool], float] = {}
    sim_sum: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as out:
        simulated = {name: simulated_totals(name, out) for name in sorted({run for _, run, _ in runs})}
    for directory, run, lease_index in runs:
        for key, (us, _) in call_totals(directory, RUNS[run][2]).items():
            real_sum[key] = real_sum.get(key, 0.0) + us / lease_index
        for key, (us, n) in simulated[run].items():
            entry = sim_sum.setdefault(key, [0.0, 0.0])
            entry[0] += us
            entry[1] += n
    print(f"{'call':48} {'path':12} {'real/index':>10} {'simulated':>10}  µs per call   constant: now -> fitted")
    fitted: dict[bool, dict[str, int]] = {False: {}, True: {}}
    for (call, keeps), (sim_us, n) in sorted(sim_sum.items()):
        real_us = real_sum.get((call, keeps), 0.0)
        now = current_ns(call, keeps)
        new = round((now / 1e3 + (real_us - sim_us) / n) * 10) * 100  # to 0.1 µs, in ns
        fitted[keeps][call] = new
        print(f"{call:48} {'accumulating' if keeps else 'reducing':12} {real_us / n:10.1f} {sim_us / n:10.1f}"
              f"               {now / 1e3:7.1f} -> {new / 1e3:7.1f}")
    constants = {"library_call_ns": {**H200_HOST.library_call_ns, **fitted[False]},
                 "accumulating_call_ns": {**H200_HOST.accumulating_call_ns, **fitted[True]}}
    sources = {"library_call_ns": LIBRARY_CALL_SOURCE, "accumulating_call_ns": FSDP2_SOURCE}
    print(f"wrote {update_fitted(GPU, 'host', constants, sources, specs_root=args.specs)}")


if __name__ == "__main__":
    main()
