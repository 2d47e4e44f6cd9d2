"""What a mixture-of-experts FFN's host pays the first time cuBLAS runs a GEMM kernel in the process.

moe_a2a.py's expert FFNs (`(silu(xe @ w1[j]) * (xe @ w3[j])) @ w2[j]` under bf16 autocast) get a new row count
almost every call, and in its 4-GPU timelines (data/h200/e2e/timelines/runs/{2026-11-22-28,2026-11-22-35}/) a few FFN calls per step take 4-5 ms of host time
in the forward and 6-23 ms in the backward, against ~0.7 and ~4 ms: at the same calls on two leases, and never
with balanced routing (fixed row counts). One GPU is enough to see why. This script replays the row counts that
one rank's experts got in those timelines (their "notes"), in a fresh process, with every FFN call's forward and
backward host time; a second pass over the same counts (every problem seen) is the baseline. With --sweep it runs
every row count in a range once under the profiler instead and records which kernels cuBLAS chose for each
GEMM, so a stall can be matched with the first launch of a kernel. Run it with CUDA_MODULE_LOADING=EAGER as well:
if the stalls are lazy module loading, they move to the process's start.

    python3 measure_gemm_first_use.py --replay data/h200/e2e/timelines/runs/2026-11-22-35/moe_ep4 --rank 0 --out r0.json
    python3 measure_gemm_first_use.py --sweep 7700 8700 --out sweep.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common.env import write_meta

DIM, FFN, LOCAL_EXPERTS = 2048, 4096, 2
MM_TAG = "phantora_mm#"


def experts(device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w1, w3, w2 as moe_a2a.py holds them: [local experts, in, out] float32 parameters."""
    torch.manual_seed(1)
    make = lambda *shape: torch.nn.Parameter(torch.randn(*shape, device=device) * 0.02)  # noqa: E731
    return make(LOCAL_EXPERTS, DIM, FFN), make(LOCAL_EXPERTS, DIM, FFN), make(LOCAL_EXPERTS, FFN, DIM)


def ffn(xe: torch.Tensor, w1, w3, w2, j: int) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return (F.silu(xe @ w1[j]) * (xe @ w3[j])) @ w2[j]


def replay_rows(timeline: Path, rank: int) -> list[list[list[int]]]:
    """Per recorded step, per layer, each local expert's row count (moe_a2a.py's "expert_rows" notes)."""
    notes = json.loads((timeline / f"rank{rank}.json").read_text())["notes"]
    return [step["expert_rows"] for step in notes]


def run_step(rows: list[list[int]], weights) -> dict:
    """One step's expert FFNs: forward in layer order, one backward over all (reverse order, as autograd runs
    them); host µs of each call's forward and of each call's backward (from the previous call's gradient)."""
    torch.cuda.synchronize()
    forward_us, outs, inputs = [], [], []
    for layer in rows:
        for j, m in enumerate(layer):
            xe = torch.randn(m, DIM, device="cuda", requires_grad=True)
            t0 = time.perf_counter_ns()
            outs.append(ffn(xe, *weights, j))
            forward_us.append((time.perf_counter_ns() - t0) / 1e3)
            inputs.append(xe)
    done = [0] * len(inputs)
    for i, xe in enumerate(inputs):
        xe.register_hook(lambda g, i=i: done.__setitem__(i, time.perf_counter_ns()))
    loss = sum(out.float().square().mean() for out in outs)
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    loss.backward()
    order = sorted(range(len(done)), key=lambda i: done[i])
    backward_us, last = [0.0] * len(done), t0
    for i in order:
        backward_us[i] = (done[i] - last) / 1e3
        last = done[i]
    torch.cuda.synchronize()
    return {"forward_us": forward_us, "backward_us": backward_us}


def replay(args) -> dict:
    weights = experts("cuda")
    steps = replay_rows(Path(args.replay), args.rank)
    passes = []
    for _ in range(args.passes):
        passes.append([{"rows": rows, **run_step(rows, weights)} for rows in steps])
    return {"rank": args.rank, "timeline": args.replay, "passes": passes}


class GemmRecorder(TorchDispatchMode):
    """Records every `aten.mm` call (its inputs' shapes, strides and dtypes) and wraps it in a profiler range,
    so that the kernels it launches can be found in the trace. Dispatch modes follow autograd into its thread."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict] = []
        self.m = 0
        self.phase = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is not torch.ops.aten.mm.default:
            return func(*args, **(kwargs or {}))
        from torch.profiler import record_function
        self.calls.append({"m": self.m, "phase": self.phase,
                           "inputs": [[list(t.shape), list(t.stride()), str(t.dtype)] for t in args[:2]]})
        with record_function(f"{MM_TAG}{len(self.calls) - 1}"):
            return func(*args, **(kwargs or {}))


def launched_kernels(trace: dict, calls: int) -> list[list[str]]:
    """Kernel names launched inside each `MM_TAG` range of a Chrome trace, in launch order."""
    events = trace["traceEvents"]
    ranges = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"][len(MM_TAG):])) for e in events
                    if e.get("ph") == "X" and e.get("name", "").startswith(MM_TAG))
    kernel_of = {e["args"]["correlation"]: e["name"] for e in events
                 if e.get("cat") == "kernel" and "correlation" in e.get("args", {})}
    launches = sorted((e["ts"], e["args"]["correlation"]) for e in events
                      if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
                      and e["args"]["correlation"] in kernel_of)
    found: list[list[str]] = [[] for _ in range(calls)]
    i = 0
    for start, end, index in ranges:
        while i < len(launches) and launches[i][0] < start:
            i += 1
        j = i
        while j < len(launches) and launches[j][0] <= end:
            found[index].append(kernel_of[launches[j][1]])
            j += 1
    return found


def sweep(args) -> dict:
    """Every row count in the range, ascending, in one profiled process: each GEMM's problem and kernels."""
    from torch.profiler import ProfilerActivity, profile
    weights = experts("cuda")
    recorder = GemmRecorder()
    host = {}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with recorder:
            for m in range(args.sweep[0], args.sweep[1] + 1):
                xe = torch.randn(m, DIM, device="cuda", requires_grad=True)
                torch.cuda.synchronize()
                recorder.m, recorder.phase = m, "forward"
                t0 = time.perf_counter_ns()
                out = ffn(xe, *weights, 0)
                t1 = time.perf_counter_ns()
                recorder.phase = "backward"
                out.float().square().mean().backward()
                t2 = time.perf_counter_ns()
                torch.cuda.synchronize()
                host[m] = [(t1 - t0) / 1e3, (t2 - t1) / 1e3]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        trace = json.loads(Path(path).read_text())
    kernels = launched_kernels(trace, len(recorder.calls))
    calls = [{**call, "kernels": names} for call, names in zip(recorder.calls, kernels)]
    return {"sweep": args.sweep, "host_us": host, "gemms": calls}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", help="a moe_a2a timeline directory with expert_rows notes")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--sweep", type=int, nargs=2, metavar=("LO", "HI"))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    write_meta(os.path.dirname(os.path.abspath(args.out)), __file__)
    t0 = time.time()
    result = replay(args) if args.replay else sweep(args)
    result.update(module_loading=os.environ.get("CUDA_MODULE_LOADING", "default"), torch=torch.__version__,
                  wall_s=round(time.time() - t0, 1))
    Path(args.out).write_text(json.dumps(result))
    print(f"{args.out}: {result['wall_s']} s")


if __name__ == "__main__":
    main()
