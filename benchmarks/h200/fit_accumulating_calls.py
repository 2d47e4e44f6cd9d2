"""Fit the host cost of FSDP2's calls in a backward that keeps its gradients (models/host.py
ACCUMULATING_CALL_NS): gradient accumulation with `set_requires_gradient_sync(False)`.

Real side: call 36 (data/h200/call36/fsdp2_ga4): the 1.5B llama with FSDP2 on 2 GPUs, batch 1, 4 micro-steps
per step, each wrapped library call's exclusive host time recorded (benchmarks/workloads/host_calls.py). Calls
come in order, so a call's micro-step is its index: 17 param groups (16 layers and the root) per micro-step for
post_backward, one final callback per micro-step; the first three micro-steps keep their gradients, the last
reduces them.

Simulated side: the same command under Phantora with both ranks at the mean host, its own call times.

The lease's speed against the mean host is taken per call from its reducing path, whose cost
(LIBRARY_CALL_NS) was fitted elsewhere: real / simulated in the last micro-step. Then, per call:

    new = current + (real accumulating / that speed - simulated accumulating)

    python benchmarks/h200/fit_accumulating_calls.py      # one simulation, about two minutes on two cores
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from fit_subclass_ops import at_mean_host  # noqa: E402  (this script's folder)
from phantora.models.host import H200_HOST  # noqa: E402

REAL = ROOT / "data" / "h200" / "call36" / "fsdp2_ga4"
WORLD, MICRO, GROUPS = 2, 4, 17
ARGS = ["--parallel", "fsdp", "--ac", "none", "--dim", "2048", "--n-layers", "16", "--n-heads", "32", "--n-kv-heads",
        "8", "--ffn-dim", "8192", "--vocab", "128256", "--seq", "4096", "--batch", "1", "--steps", "8",
        "--grad-accum", str(MICRO)]
PER_MICRO_STEP = {"FSDPParamGroup.post_backward": GROUPS, "FSDPState._root_post_backward_final_callback": 1}


def by_path(directory: Path) -> dict[str, tuple[float, float]]:
    """Call name -> (mean over the accumulating micro-steps, the reducing micro-step) of per-position medians, µs,
    over both ranks."""
    out = {}
    for name, per in PER_MICRO_STEP.items():
        medians = {m: [] for m in range(MICRO)}
        for rank in range(WORLD):
            calls = json.loads((directory / f"rank{rank}.json").read_text())["calls"][name]
            for m in range(MICRO):
                medians[m].append(statistics.median(v for i, v in enumerate(calls) if (i % (per * MICRO)) // per == m))
        out[name] = (statistics.fmean(x for m in range(MICRO - 1) for x in medians[m]),
                     statistics.fmean(medians[MICRO - 1]))
    return out


def simulate(out: str) -> Path:
    """The configuration at the mean host; the folder of its library calls' host times."""
    calls = Path(out) / "calls"
    at_mean_host("llama_train.py", WORLD, ARGS, os.path.join(out, "run"), PHANTORA_BENCH_HOST_CALLS=str(calls))
    return calls


def main() -> None:
    real = by_path(REAL)
    with tempfile.TemporaryDirectory() as out:
        sim = by_path(simulate(out))
    for name in PER_MICRO_STEP:
        (real_acc, real_red), (sim_acc, sim_red) = real[name], sim[name]
        speed = real_red / sim_red
        now = H200_HOST.accumulating_call_ns[name] / 1e3
        print(f"{name}: real {real_acc:.0f} accumulating / {real_red:.0f} reducing µs, simulated {sim_acc:.0f} / "
              f"{sim_red:.0f}; lease speed {speed:.2f} -> {now + real_acc / speed - sim_acc:.1f} µs (now {now:.1f})")


if __name__ == "__main__":
    main()
