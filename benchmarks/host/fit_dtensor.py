"""Fit the host cost of DTensor's own dispatch (models/host.py `subclass_op_ns`, `subclass_backward_op_ns`,
`subclass_op_per_tensor_ns`) on the tensor-parallel steps' host phases.

Real side: every layer timeline of llama_l1b_tp2, llama_l1b_tp4 and llama_l1b_fsdp2_tp2 under
data/h200/e2e/timelines/ (benchmarks/workloads/timeline.py; five leases) whose lease has an index
(benchmarks/host/leases.py: one lease's has none). A rank's forward host time is its first layer's start to its last layer's end, its backward
host time the loss mark to the backward mark, its clip + optimizer host time the backward mark to the optimizer
mark, each over its lease's index; the mean over every rank and recorded step is the average lease's *mean
host's* (the one the host model's constants stand for: models/host_contention.py Note [Contended hosts]),
contention included at the rate those leases had it.

Simulated side: the same command under Phantora with every rank at the mean host (`--host-contention
none --host-time-scale` the contended hosts' mean factor), its own timeline, and the ranks' counts of
subclass ops issued by the autograd engine. The backward constant then moves by the backward's host
time the simulation has too much, over those ops:

    new = current - (simulated - real) / backward subclass ops per rank and step

and the forward constant likewise, over the DTensor ops issued from Python (not the engine's, not those a
functional collective's result dispatches: `async_collective_op_ns`, fitted on the MoE). That count includes
the clip's and the optimizer's few foreach ops (about 20 of ~1000 per step), which the forward span does not.
The per-tensor constant likewise, over the list ops' extra DTensors in the clip + optimizer span
(`clip_grad_norm_` and AdamW, foreach: 2342 for the model's 147 parameters). Runs the three simulations (a few
minutes on two cores), and writes the three constants to src/phantora/specs/<gpu>/host.json:

    python -m benchmarks.host.fit_dtensor [--specs DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import BENCHMARKS, REPO, SPECS, data_dir, relative
from benchmarks.host import leases
from benchmarks.host.fit_contention import forward_host_ms
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value
MEAN_HOST_FACTOR = load_profile("h200").host_contention.value.mean_factor()
"""The measured hosts' mean over an uncontended one's: the timelines' hosts, run as one uncontended host."""

LLAMA = ["--ac", "none", "--dim", "2048", "--n-layers", "16", "--n-heads", "32", "--n-kv-heads", "8", "--ffn-dim",
         "8192", "--vocab", "128256", "--seq", "4096", "--batch", "2", "--steps", "6"]
LLAMA_PARAMS = 9 * int(LLAMA[LLAMA.index("--n-layers") + 1]) + 3
"""The model's parameters (each a DTensor): 9 per layer, the embedding, the final norm and the output."""
CONFIGS = {
    "llama_l1b_tp2": (2, ["--parallel", "tp"]),
    "llama_l1b_tp4": (4, ["--parallel", "tp"]),
    "llama_l1b_fsdp2_tp2": (4, ["--parallel", "fsdp_tp", "--tp", "2"]),
}


PHASES = ("forward", "backward", "clip + optimizer")
GPU = "h200"
TIMELINES = data_dir(GPU, "e2e", "timelines")


def phase_host_ms(step: list) -> tuple[float, float, float]:
    """A rank's forward (first layer's start to last layer's end), backward (loss mark to backward mark) and
    clip + optimizer (backward mark to optimizer mark) host ms in one step."""
    marks = {label: host for label, host, _ in step}
    return (forward_host_ms(step), (marks["backward"] - marks["loss"]) / 1000,
            (marks["optimizer"] - marks["backward"]) / 1000)


def phase_means(directories: list[str], at_average_lease: bool = False) -> tuple[list[float], int]:
    """Mean host ms of each of PHASES over every rank and step of these timelines, and the sample count; with
    `at_average_lease`, each real timeline's times over its lease's index."""
    samples = []
    for directory in directories:
        scale = leases.average_lease_scale(leases.lease_of_path(directory)) if at_average_lease else 1.0
        for path in sorted(glob.glob(os.path.join(directory, "rank*.json"))):
            with open(path) as f:
                samples += [[scale * ms for ms in phase_host_ms(step)] for step in json.load(f)["steps"]]
    return [statistics.mean(column) for column in zip(*samples)], len(samples)


def real_timelines(config: str) -> list[str]:
    """Every real layer timeline of `config` under data/h200/e2e/timelines/ whose lease has an index."""
    found = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(TIMELINES, "**", config, "rank0.json"),
                                                         recursive=True)})
    return [d for d in found if leases.lease_of_path(d) in leases.lease_index()]


def at_mean_host(script: str, world: int, args: list[str], out: str, **bench: str) -> None:
    """Simulate benchmarks/workloads/`script` on `world` ranks, every one at the mean host, its output under `out`;
    `bench`: the workload's PHANTORA_BENCH_* variables (what it records beside)."""
    command = [sys.executable, "-m", "phantora.cli.main", "torchrun", "--gpu", "h200", "--nproc-per-node", str(world),
               "--host-contention", "none", "--host-time-scale", f"{MEAN_HOST_FACTOR:.6f}", "--no-trace",
               "--out", out, str(BENCHMARKS / "workloads" / script), *args]
    env = {**os.environ, **bench, "PYTHONPATH": str(REPO / "src")}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timeline_at_mean_host(script: str, world: int, args: list[str], out: str) -> str:
    """`at_mean_host` with the layer timeline; the timeline's directory (under `out`)."""
    timeline = os.path.join(out, "timeline")
    at_mean_host(script, world, args, out, PHANTORA_BENCH_TIMELINE=timeline)
    return timeline


def foreach_extra_tensors(params: int) -> int:
    """DTensors beyond the first in each list op of `clip_grad_norm_` and AdamW (foreach) over `params`
    parameters: the clip's norms, their stack and the scaling (which takes the clip coefficient too), and the
    optimizer's 8 DTensor ops over 13 lists (its step counts are CPU tensors)."""
    clip = (params - 1) + (params - 1) + params
    optimizer = 13 * params - 8
    return clip + optimizer


def simulate(config: str, world: int, args: list[str], out: str) -> tuple[list[float], float, float]:
    """Host ms of PHASES at the mean host, and DTensor ops issued from Python and by the engine per rank and step."""
    timeline = timeline_at_mean_host("llama_train.py", world, [*args, *LLAMA], out)
    phases, _ = phase_means([timeline])
    steps = int(LLAMA[LLAMA.index("--steps") + 1])
    results = [json.load(open(os.path.join(out, f"rank{r}", "result.json"))) for r in range(world)]
    engine = statistics.mean(r["subclass_backward_ops"] for r in results) / steps
    python = statistics.mean(r["subclass_ops"] - r["subclass_backward_ops"] - r["async_collective_ops"]
                             for r in results) / steps
    return phases, python, engine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    options = p.parse_args()
    now = [H200_HOST.subclass_op_ns / 1000, H200_HOST.subclass_backward_op_ns / 1000,
           H200_HOST.subclass_op_per_tensor_ns / 1000]
    names = ("subclass_op_ns", "subclass_backward_op_ns", "subclass_op_per_tensor_ns")
    implied, weights = [], []
    for config, (world, args) in CONFIGS.items():
        real, samples = phase_means(real_timelines(config), at_average_lease=True)
        with tempfile.TemporaryDirectory() as out:
            sim, python, engine = simulate(config, world, args, out)
        counts = (python, engine, foreach_extra_tensors(LLAMA_PARAMS))
        new = [c - (s - r) * 1000 / n for c, s, r, n in zip(now, sim, real, counts)]
        implied.append(new)
        weights.append(samples)
        print(f"{config}: real (n={samples}) / simulated host ms: "
              + ", ".join(f"{p} {r:.1f} / {s:.1f}" for p, r, s in zip(PHASES, real, sim))
              + f"; {python:.0f} / {engine:.0f} DTensor ops per step, {counts[2]} extra list tensors -> "
              + ", ".join(f"{n} {v:.1f} us" for n, v in zip(names, new)))
    pooled = [sum(i[k] * w for i, w in zip(implied, weights)) / sum(weights) for k in range(3)]
    print("pooled (weighted by real samples): " + ", ".join(f"{n} = {v:.1f} us (now {c:.1f})"
                                                             for n, v, c in zip(names, pooled, now)))
    constants = {name: int(round(us * 10)) * 100 for name, us in zip(names, pooled)}  # to 0.1 µs, in ns
    source = f"benchmarks/host/fit_dtensor.py on {relative(TIMELINES)} (tp2, tp4, fsdp2_tp2, indexed leases)"
    print(f"wrote {update_fitted(GPU, 'host', constants, dict.fromkeys(constants, source), specs_root=options.specs)}")


if __name__ == "__main__":
    main()
