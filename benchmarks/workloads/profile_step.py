"""Profile one training step on a real GPU: every kernel, memcpy and memset with its stream and times.

Used by the workload scripts when PHANTORA_BENCH_PROFILE_DIR is set: after the measured steps they run
one more step under torch.profiler (CUDA activity; with PHANTORA_BENCH_PROFILE_CPU=1 also the host's
CUDA runtime calls, which gives each kernel its launch time) and each rank writes
DIR/rank{R}.json.gz = {"wall_ms", "names": [...], "kernels": [[name index, stream, start µs, dur µs,
category, host launch µs or None], ...], "host": [[name, start µs, dur µs], ...]} with start relative to the step's first GPU activity
(with PHANTORA_BENCH_PROFILE_HOST_ALL=1 too, "host" holds every host op and CUDA runtime and driver call). This is the real-GPU side of
`benchmarks/e2e/compare_step.py`, which lines it up with a Phantora trace of the same step.

`python benchmarks/workloads/profile_step.py TRACES --out DIR` writes the same from the chrome traces a
program's own profiler wrote (TorchTitan's `--profiling.*`: TRACES/rank{R}_trace.json, one step).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_MARKS = ("FSDP", "DDP", "Optimizer", "aten::mm", "aten::_scaled_dot_product", "autograd::engine")
"""Host-side ranges kept with PHANTORA_BENCH_PROFILE_CPU: FSDP2's and DDP's own annotations, the
optimizer step, and a few anchor ops."""


def profile(step_fn, out_dir: str, rank: int) -> None:
    """Run `step_fn` once under the profiler and write this rank's kernel list."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    activities = [ProfilerActivity.CUDA]
    if os.environ.get("PHANTORA_BENCH_PROFILE_CPU"):  # also the host's launch calls (adds host overhead)
        activities.append(ProfilerActivity.CPU)
    with torch_profile(activities=activities) as prof:
        step_fn()
        torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.unlink(path)
    write(compact(events, wall_ms), out_dir, rank)


def compact(events: list[dict], wall_ms: float) -> dict:
    """The kernel list of one profiled step from the profiler's chrome-trace events."""
    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES and "dur" in e]
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    start = min((e["ts"] for e in gpu), default=0.0)
    names: dict[str, int] = {}
    rows = []
    for e in gpu:
        launch = launches.get(e.get("args", {}).get("correlation"))
        rows.append([names.setdefault(e["name"], len(names)), e.get("args", {}).get("stream", -1),
                     round(e["ts"] - start, 3), round(e["dur"], 3), e["cat"],
                     None if launch is None else round(launch - start, 3)])
    every = os.environ.get("PHANTORA_BENCH_PROFILE_HOST_ALL") == "1"  # every host op and CUDA runtime call
    host_categories = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver") if every else ("cpu_op", "user_annotation")
    host = [[e["name"], round(e["ts"] - start, 3), round(e["dur"], 3)] for e in events
            if e.get("cat") in host_categories and "dur" in e and (every or e["name"].startswith(HOST_MARKS))]
    return {"wall_ms": wall_ms, "names": list(names), "kernels": rows, "host": host}


def write(profile_data: dict, out_dir: str, rank: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with gzip.open(os.path.join(out_dir, f"rank{rank}.json.gz"), "wt") as f:
        json.dump(profile_data, f)


def main() -> int:
    """Convert chrome traces that a program's own profiler wrote (TorchTitan's `--profiling.*`, one
    active step, rank{R}_trace.json) into this module's kernel lists."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("traces", help="directory holding rank{R}_trace.json")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    for path in sorted(glob.glob(os.path.join(a.traces, "rank*_trace.json"))):
        rank = int(re.search(r"rank(\d+)_trace", path).group(1))
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#") and "dur" in e]
        wall_ms = max(e["dur"] for e in steps) / 1e3 if steps else 0.0
        write(compact(events, wall_ms), a.out, rank)
        print(f"{path}: {sum(1 for e in events if e.get('cat') in GPU_CATEGORIES)} GPU activities, step {wall_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
