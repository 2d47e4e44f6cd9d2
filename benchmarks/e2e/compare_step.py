"""Line up one training step as a real GPU ran it with the same step as Phantora simulated it.

Real side: a profile written by `benchmarks/workloads/profile_step.py` (data/h200/e2e/step_profiles/), or
converted by it from a program's own profiler traces (TorchTitan's: data/h200/e2e/step_profiles/runs/2026-11-22-19/).
Simulated side: a Phantora `trace.json` of the same configuration; its last whole step is the work
launched between the ends of the last two optimizer steps the rank marked (`rank<R>/steps.jsonl` beside the
trace: config/steps.py), whatever the program synchronizes inside a step (Megatron-core does). Prints, per
rank: the step's GPU span, time per kernel
class (GPU time of its kernels, summed), NCCL time per collective, and how much compute ran while
NCCL kernels ran.

    python -m benchmarks.e2e.compare_step data/h200/e2e/step_profiles/profiles/llama_l1b_fsdp4 OUT/trace.json

The real side may also be a program's own profiler trace of one step (TorchTitan's, as kept in
data/h200/e2e/frameworks/profiles/NAME.rankR.trace.json.gz), read as it is. `--held-sms` then prints
what the sharing model's held SMs rest on (models/interference.py): the thread blocks of each large
NCCL kernel, and each GEMM kernel's median time alone and while an NCCL kernel of its GPU runs.

    python -m benchmarks.e2e.compare_step \
        data/h200/e2e/frameworks/profiles/torchtitan_llama3_8b_fsdp2_tp2.rank0.trace.json.gz OUT/trace.json --held-sms
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from phantora.reports.steps import load_step_marks

# Real kernel names -> Phantora's kernel classes (first match wins).
REAL_CLASSES = [
    ("nccl", re.compile(r"^ncclDevKernel|^ncclKernel")),
    ("attention", re.compile(r"sdpa|flash|fmha|cudnn::fusion", re.I)),
    ("gemm", re.compile(r"nvjet|gemm|cutlass|xmma|sm90_", re.I)),
    ("foreach", re.compile(r"multi_tensor_apply")),
    ("loss", re.compile(r"SoftMax|nll_loss")),
    ("embedding", re.compile(r"sum_and_scatter|compute_grad_weight|radix_sort|embedding|indexing_backward")),
    ("norm", re.compile(r"layer_norm|rms_norm|GammaBeta", re.I)),
    ("reduction", re.compile(r"reduce_kernel")),
    ("memset", re.compile(r"^Memset|FillFunctor")),
    ("copy", re.compile(r"copy|chunk_cat", re.I)),  # CatArrayBatchedCopy, direct_copy, Memcpy
]
NCCL_OP = re.compile(r"ncclDevKernel_([A-Za-z]+)")


def real_class(name: str) -> str:
    return next((cls for cls, pattern in REAL_CLASSES if pattern.search(name)), "elementwise")


def load_real(path: Path) -> list[tuple[str, str, int, float, float]]:
    """(class, name, stream, start µs, end µs) for every GPU activity of one profiled rank: a kernel list of
    benchmarks/workloads/profile_step.py, or a profiler's Chrome trace (*.trace.json.gz)."""
    if path.name.endswith(".trace.json.gz"):
        events = gpu_events(path)
        start = min(e["ts"] for e in events)
        return [(real_class(e["name"]), e["name"], e["args"].get("stream", -1), e["ts"] - start, e["ts"] + e["dur"] - start)
                for e in events]
    d = json.load(gzip.open(path, "rt"))
    names = d["names"]
    return [(real_class(names[n]), names[n], stream, ts, ts + dur) for n, stream, ts, dur, *_ in d["kernels"]]


def gpu_events(path: Path) -> list[dict]:
    """The GPU activities (kernels, copies, memsets) of a profiler's Chrome trace, with their arguments."""
    events = json.load(gzip.open(path, "rt"))["traceEvents"]
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]


def gemm_shapes(path: Path) -> dict[int, str]:
    """The input shapes of each matrix-multiply op of a profiler's Chrome trace (record_shapes), by the
    "External id" its kernels carry."""
    events = json.load(gzip.open(path, "rt"))["traceEvents"]
    return {e["args"]["External id"]: str(e["args"].get("Input Dims")) for e in events
            if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm", "aten::bmm")}


def held_sms(path: Path, min_bytes: int = 1 << 20) -> None:
    """Print the thread blocks of the NCCL kernels of collectives of at least `min_bytes` per rank, and each
    GEMM kernel's median duration alone and while an NCCL kernel of the same GPU runs (waiting or moving data)."""
    events = gpu_events(path)
    blocks: dict[tuple[str, int], int] = defaultdict(int)
    for e in events:
        a = e["args"]
        if e["name"].startswith("ncclDevKernel") and a.get("In msg nelems", 0) * 2 >= min_bytes:
            blocks[(a.get("Collective name", "?"), a["grid"][0] * a["grid"][1] * a["grid"][2])] += 1
    for (op, n), count in sorted(blocks.items()):
        print(f"  nccl {op}: {count} kernels of {n} blocks")
    nccl = union([(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ncclDevKernel")])
    shapes = gemm_shapes(path)
    times: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for e in events:
        if real_class(e["name"]) == "gemm":
            beside = overlap_with([(e["ts"], e["ts"] + e["dur"])], nccl)
            if beside == 0.0 or beside >= 0.99 * e["dur"]:  # wholly alone or wholly beside NCCL
                key = f"{shapes.get(e['args'].get('External id'), '?')} {e['name'][:30]}"
                times[key][beside > 0].append(e["dur"])
    print(f"  {'GEMM (input shapes, kernel)':<80}{'alone µs':>9}{'beside NCCL':>12}{'ratio':>7}  (kernels)")
    for key, (alone, beside) in sorted(times.items(), key=lambda kv: -sum(kv[1][0]) - sum(kv[1][1])):
        if len(alone) >= 3 and len(beside) >= 3:
            a, b = statistics.median(alone), statistics.median(beside)
            print(f"  {key:<80}{a:9.0f}{b:12.0f}{b / a:7.2f}  ({len(alone)}, {len(beside)})")


def last_step_kernels(trace: Path, rank: int) -> list[dict]:
    """The GPU events (kernels, copies, NCCL operations) that `rank` launched in its last whole step of a
    Phantora trace: between the ends of its last two optimizer steps (the step marks beside the trace)."""
    marks = load_step_marks(trace.parent, rank)
    if len(marks) < 2:
        raise SystemExit(f"{trace.parent}: rank {rank} marked fewer than two optimizer steps "
                         f"(rank{rank}/steps.jsonl): no whole step to compare")
    lo, hi = marks[-2] / 1e3, marks[-1] / 1e3  # the trace's times are µs
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [e for e in events if e.get("pid") == rank and e.get("ph") == "X"
            and e.get("cat") not in ("host_blocked", "nccl_wait")
            and lo < e.get("args", {}).get("launch_us", e["ts"]) <= hi]


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
    p.add_argument("profile", type=Path, help="data/h200/e2e/step_profiles/profiles/NAME, or a profiler's "
                   "NAME.rankR.trace.json.gz of that rank")
    p.add_argument("trace", type=Path, help="trace.json of a Phantora run of the same configuration")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--held-sms", action="store_true", help="also print NCCL kernels' blocks and GEMMs beside them "
                   "(a profiler's trace only)")
    a = p.parse_args()
    path = a.profile if a.profile.is_file() else a.profile / f"rank{a.rank}.json.gz"
    if a.held_sms and not path.name.endswith(".trace.json.gz"):
        raise SystemExit("--held-sms needs a profiler's Chrome trace (NAME.rankR.trace.json.gz): kernel lists keep no blocks")
    real = summarize(load_real(path))
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
    if a.held_sms:
        held_sms(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
