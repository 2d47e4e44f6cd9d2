"""Line up one training step as a real GPU ran it with the same step as Phantora simulated it.

Real side: a profile written by `benchmarks/workloads/profile_step.py` (data/h200/e2e/step_profiles/), or
converted by it from a program's own profiler traces (TorchTitan's: data/h200/e2e/step_profiles/runs/2026-11-22-19/).
Simulated side: a Phantora `trace.json` of the same configuration; its last whole step is the work
launched between the last two device synchronizations that waited for the GPU (the scripts
synchronize before and after every step). Prints, per rank: the step's GPU span, time per kernel
class (GPU time of its kernels, summed), NCCL time per collective, and how much compute ran while
NCCL kernels ran.

    python -m benchmarks.e2e.compare_step data/h200/e2e/step_profiles/profiles/llama_l1b_fsdp4 OUT/trace.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

# Real kernel names -> Phantora's kernel classes (first match wins).
REAL_CLASSES = [
    ("nccl", re.compile(r"^ncclDevKernel|^ncclKernel")),
    ("attention", re.compile(r"sdpa|flash|fmha|cudnn::fusion", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|cutlass|xmma|sm90_", re.I)),
    ("foreach", re.compile(r"multi_tensor_apply")),
    ("loss", re.compile(r"SoftMax|nll_loss")),
    ("embedding", re.compile(r"sum_and_scatter|compute_grad_weight|radix_sort|embedding|indexing_backward")),
    ("reduction", re.compile(r"reduce_kernel")),
    ("memset", re.compile(r"^Memset|FillFunctor")),
    ("copy", re.compile(r"copy|Memcpy|chunk_cat")),
]
NCCL_OP = re.compile(r"ncclDevKernel_([A-Za-z]+)")


def real_class(name: str) -> str:
    return next((cls for cls, pattern in REAL_CLASSES if pattern.search(name)), "elementwise")


def load_real(path: Path) -> list[tuple[str, str, int, float, float]]:
    """(class, name, stream, start µs, end µs) for every GPU activity of one profiled rank."""
    d = json.load(gzip.open(path, "rt"))
    names = d["names"]
    return [(real_class(names[n]), names[n], stream, ts, ts + dur) for n, stream, ts, dur, *_ in d["kernels"]]


def last_step_kernels(trace: Path, rank: int) -> list[dict]:
    """The GPU events (kernels, copies, NCCL operations) that `rank` launched in its last whole step of a
    Phantora trace: between its last two device synchronizations that waited (the scripts synchronize
    before and after every step), or, for a program that does not (TorchTitan), between the ends of its
    last two whole optimizer steps."""
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    mine = [e for e in events if e.get("pid") == rank and e.get("ph") == "X"]
    waits = sorted(e["ts"] + e["dur"] for e in mine if e.get("name") == "cudaDeviceSynchronize" and e.get("dur", 0) > 0)
    if len(waits) < 2:
        waits = optimizer_step_ends(mine)[:-1]  # the last optimizer step may be the run's end, cut short
    if len(waits) < 2:
        raise SystemExit(f"{trace}: rank {rank} has neither two waiting device synchronizations nor two optimizer steps")
    lo, hi = waits[-2], waits[-1]
    return [e for e in mine if e.get("cat") not in ("host_blocked", "nccl_wait")
            and lo < e["args"].get("launch_us", e["ts"]) <= hi]


def optimizer_step_ends(events: list[dict], gap_us: float = 100e3) -> list[float]:
    """Launch times of the last optimizer (foreach) kernel of each step: runs of them apart by more than `gap_us`."""
    launches = sorted(e["args"].get("launch_us", e["ts"]) for e in events if e.get("cat") == "foreach")
    return [t for t, after in zip(launches, [*launches[1:], float("inf")]) if after - t > gap_us]


def load_simulated(trace: Path, rank: int) -> list[tuple[str, str, int, float, float]]:
    """The same for the last whole step of `rank` in a Phantora trace."""
    rows = []
    for e in last_step_kernels(trace, rank):
        name = e["name"] if e["cat"] != "nccl" else f"nccl {e['args'].get('op', e['name'])}"
        rows.append((e["cat"], name, e["tid"], e["ts"], e["ts"] + e["dur"]))
    start = min(r[3] for r in rows)
    return [(c, n, s, a - start, b - start) for c, n, s, a, b in rows]


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap_with(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Length of `intervals` (summed) that lies inside the union `cover`."""
    total = 0.0
    for a, b in sorted(intervals):
        for c, d in cover:
            if d <= a:
                continue
            if c >= b:
                break
            total += min(b, d) - max(a, c)
    return total


def summarize(rows: list[tuple[str, str, int, float, float]]) -> dict:
    by_class: dict[str, float] = defaultdict(float)
    nccl_ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for cls, name, _, a, b in rows:
        by_class[cls] += b - a
        if cls == "nccl":
            m = NCCL_OP.search(name)
            op = (m.group(1) if m else name.split()[-1]).lower().replace("_", "")
            nccl_ops[op][0] += 1
            nccl_ops[op][1] += b - a
    nccl = union([(a, b) for cls, _, _, a, b in rows if cls == "nccl"])
    compute = [(a, b) for cls, _, _, a, b in rows if cls != "nccl"]
    return {"span_ms": max(r[4] for r in rows) / 1e3, "by_class_ms": {k: v / 1e3 for k, v in by_class.items()},
            "compute_ms": sum(b - a for a, b in compute) / 1e3,
            "compute_busy_ms": sum(b - a for a, b in union(compute)) / 1e3,
            "compute_under_nccl_ms": overlap_with(compute, nccl) / 1e3,
            "nccl_busy_ms": sum(b - a for a, b in nccl) / 1e3,
            "nccl_ops": {k: (int(n), t / 1e3) for k, (n, t) in nccl_ops.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile_dir", type=Path, help="data/h200/e2e/step_profiles/profiles/NAME")
    p.add_argument("trace", type=Path, help="trace.json of a Phantora run of the same configuration")
    p.add_argument("--rank", type=int, default=0)
    a = p.parse_args()
    real = summarize(load_real(a.profile_dir / f"rank{a.rank}.json.gz"))
    sim = summarize(load_simulated(a.trace, a.rank))
    print(f"{'rank ' + str(a.rank):<26}{'real':>10}{'phantora':>10}{'error':>9}")

    def row(label: str, r: float, s: float) -> None:
        err = f"{(s - r) / r * 100:+.1f}%" if r else ""
        print(f"{label:<26}{r:10.2f}{s:10.2f}{err:>9}")

    for key in ("span_ms", "compute_ms", "compute_busy_ms", "nccl_busy_ms", "compute_under_nccl_ms"):
        row(key, real[key], sim[key])
    for cls in sorted(set(real["by_class_ms"]) | set(sim["by_class_ms"]), key=lambda c: (-real["by_class_ms"].get(c, 0), c)):
        row(f"  {cls}", real["by_class_ms"].get(cls, 0.0), sim["by_class_ms"].get(cls, 0.0))
    for op in sorted(set(real["nccl_ops"]) | set(sim["nccl_ops"])):
        rn, rt = real["nccl_ops"].get(op, (0, 0.0))
        sn, st = sim["nccl_ops"].get(op, (0, 0.0))
        row(f"  nccl {op} ({rn}/{sn} calls)", rt, st)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
