"""Fit the host cost of DTensor's own dispatch (models/host.py `subclass_op_ns`, `subclass_backward_op_ns`)
on the tensor-parallel steps' host phases.

Real side: every layer timeline of llama_l1b_tp2, llama_l1b_tp4 and llama_l1b_fsdp2_tp2 under data/h200/
(benchmarks/workloads/timeline.py; calls 14, 15 and 27 and session 5's, on leases of different contention). A
rank's forward host time is its first layer's start to its last layer's end, its backward host time the
loss mark to the backward mark; the mean over every rank and recorded step is the *mean host's* (the one
the host model's constants stand for: models/host_contention.py Note [Contended hosts]), contention
included at the rate those leases had it.

Simulated side: the same command under Phantora with every rank at the mean host (`--host-contention
none --host-time-scale` the contended hosts' mean factor), its own timeline, and the ranks' counts of
subclass ops issued by the autograd engine. The backward constant then moves by the backward's host
time the simulation has too much, over those ops:

    new = current - (simulated - real) / backward subclass ops per rank and step

and the forward constant likewise, over the DTensor ops issued from Python (not the engine's, not those a
functional collective's result dispatches: `async_collective_op_ns`, fitted on the MoE). That count includes
the clip's and the optimizer's few foreach ops (about 20 of ~1000 per step), which the forward span does not.
Runs the three simulations (a few minutes on two cores):

    python benchmarks/h200/fit_subclass_ops.py
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "src"))

from fit_host_contention import forward_host_ms  # noqa: E402  (this script's folder)
from phantora.models.host import H200_HOST  # noqa: E402
from phantora.models.host_contention import H200_VM  # noqa: E402

LLAMA = ["--ac", "none", "--dim", "2048", "--n-layers", "16", "--n-heads", "32", "--n-kv-heads", "8", "--ffn-dim",
         "8192", "--vocab", "128256", "--seq", "4096", "--batch", "2", "--steps", "6"]
CONFIGS = {
    "llama_l1b_tp2": (2, ["--parallel", "tp"]),
    "llama_l1b_tp4": (4, ["--parallel", "tp"]),
    "llama_l1b_fsdp2_tp2": (4, ["--parallel", "fsdp_tp", "--tp", "2"]),
}


def phase_means(directories: list[str]) -> tuple[float, float, int]:
    """Mean forward and backward host ms over every rank and step of these timelines, and the sample count."""
    forward, backward = [], []
    for directory in directories:
        for path in sorted(glob.glob(os.path.join(directory, "rank*.json"))):
            with open(path) as f:
                steps = json.load(f)["steps"]
            for step in steps:
                marks = {label: host for label, host, _ in step}
                forward.append(forward_host_ms(step))
                backward.append((marks["backward"] - marks["loss"]) / 1000)
    return statistics.mean(forward), statistics.mean(backward), len(forward)


def at_mean_host(script: str, world: int, args: list[str], out: str, **bench: str) -> None:
    """Simulate benchmarks/workloads/`script` on `world` ranks, every one at the mean host, its output under `out`;
    `bench`: the workload's PHANTORA_BENCH_* variables (what it records beside)."""
    command = [sys.executable, "-m", "phantora.cli.main", "torchrun", "--gpu", "h200", "--nproc-per-node", str(world),
               "--host-contention", "none", "--host-time-scale", f"{H200_VM.mean_factor():.6f}", "--no-trace",
               "--out", out, os.path.join(ROOT, "benchmarks", "workloads", script), *args]
    env = {**os.environ, **bench, "PYTHONPATH": os.path.join(ROOT, "src")}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timeline_at_mean_host(script: str, world: int, args: list[str], out: str) -> str:
    """`at_mean_host` with the layer timeline; the timeline's directory (under `out`)."""
    timeline = os.path.join(out, "timeline")
    at_mean_host(script, world, args, out, PHANTORA_BENCH_TIMELINE=timeline)
    return timeline


def simulate(config: str, world: int, args: list[str], out: str) -> tuple[float, float, float, float]:
    """Forward and backward host ms of the mean host, and DTensor ops issued from Python and by the engine
    per rank and step."""
    timeline = timeline_at_mean_host("llama_train.py", world, [*args, *LLAMA], out)
    forward, backward, _ = phase_means([timeline])
    steps = int(LLAMA[LLAMA.index("--steps") + 1])
    results = [json.load(open(os.path.join(out, f"rank{r}", "result.json"))) for r in range(world)]
    engine = statistics.mean(r["subclass_backward_ops"] for r in results) / steps
    python = statistics.mean(r["subclass_ops"] - r["subclass_backward_ops"] - r["async_collective_ops"]
                             for r in results) / steps
    return forward, backward, python, engine


def main() -> None:
    fwd_now, bwd_now = H200_HOST.subclass_op_ns / 1000, H200_HOST.subclass_backward_op_ns / 1000
    implied, weights = [], []
    for config, (world, args) in CONFIGS.items():
        real = sorted({os.path.dirname(p) for p in glob.glob(os.path.join(ROOT, "data", "h200", "**", "timeline",
                                                                         config, "rank0.json"), recursive=True)})
        real_fwd, real_bwd, samples = phase_means(real)
        with tempfile.TemporaryDirectory() as out:
            sim_fwd, sim_bwd, python, engine = simulate(config, world, args, out)
        new = (fwd_now - (sim_fwd - real_fwd) * 1000 / python, bwd_now - (sim_bwd - real_bwd) * 1000 / engine)
        implied.append(new)
        weights.append(samples)
        print(f"{config}: real (n={samples}) forward {real_fwd:.1f} / backward {real_bwd:.1f} ms; "
              f"simulated {sim_fwd:.1f} / {sim_bwd:.1f} ms with {python:.0f} / {engine:.0f} DTensor ops per step "
              f"-> subclass_op_ns {new[0]:.1f} us, subclass_backward_op_ns {new[1]:.1f} us")
    pooled = [sum(i[k] * w for i, w in zip(implied, weights)) / sum(weights) for k in (0, 1)]
    print(f"pooled (weighted by real samples): subclass_op_ns = {pooled[0]:.1f} us (now {fwd_now:.1f}), "
          f"subclass_backward_op_ns = {pooled[1]:.1f} us (now {bwd_now:.1f})")


if __name__ == "__main__":
    main()
