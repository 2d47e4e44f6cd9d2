"""Host (CPU) cost of eager PyTorch calls on the GPU machine's CPU (no profiler).

For each case: warm up, then N calls back to back with no synchronisation; issue time per
call = (perf_counter after the N calls - before) / N; the GPU kernels are tiny, so the CPU is
the bottleneck (we also record the time to drain, to check). The number of ops each call
dispatches (as Phantora's runtime sees them) is counted once under the recording mode, so the
host model's per-op constants can be derived. Writes $OUT/host.json.
"""

import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.common.env import write_meta
from benchmarks.common.encode import Recorder, out_dir

DRY = os.environ.get("PH_DRY") == "1"
DEV = "cpu" if DRY else "cuda"
BF16 = torch.bfloat16


def sync():
    if not DRY:
        torch.cuda.synchronize()


def timeit(fn, n, repeats=3):
    for _ in range(min(200, n)):
        fn()
    sync()
    issue, total = [], []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        issue.append((t1 - t0) / n)
        total.append((t2 - t0) / n)
    return statistics.median(issue), statistics.median(total)


def count_ops(fn):
    rec = Recorder()
    with rec.mode("count"):
        fn()
    sync()
    return [o["name"] for o in rec.ops]


def main():
    write_meta(out_dir(), __file__)
    N = 200 if DRY else 5000
    a = torch.ones(1, device=DEV)
    b = torch.ones(1, device=DEV)
    c = torch.empty(1, device=DEV)
    ab = torch.ones(1, device=DEV, dtype=BF16)
    x64 = torch.randn(64, 64, device=DEV, dtype=BF16)
    x64f = torch.randn(64, 64, device=DEV)
    q = torch.randn(1, 2, 64, 64, device=DEV, dtype=BF16)
    logits = torch.randn(8, 128, device=DEV)
    tgt = torch.zeros(8, dtype=torch.long, device=DEV)
    lin = nn.Linear(64, 64, bias=False, device=DEV)
    linb = nn.Linear(64, 64, bias=True, device=DEV)
    xin = torch.randn(8, 64, device=DEV)

    def lin_fwd_bwd():
        lin(xin).sum().backward()

    def lin_amp_fwd():
        with torch.autocast(DEV, dtype=BF16):
            lin(xin)

    cases = {
        "add_inplace_1elem": lambda: a.add_(b),
        "add_alloc_1elem": lambda: a + b,
        "add_out_1elem": lambda: torch.add(a, b, out=c),
        "mul_scalar_1elem": lambda: a * 2.0,
        "silu_1elem": lambda: F.silu(a),
        "to_f32_1elem": lambda: ab.float(),
        "sum_1elem": lambda: a.sum(),
        "fill_1elem": lambda: c.fill_(1.0),
        "view": lambda: a.view(-1),
        "t": lambda: x64.t(),
        "transpose_reshape": lambda: x64.t().reshape(-1),
        "empty": lambda: torch.empty(16, device=DEV),
        "mm_bf16_64": lambda: torch.mm(x64, x64),
        "mm_fp32_64": lambda: torch.mm(x64f, x64f),
        "sdpa_small_causal": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "cross_entropy_small": lambda: F.cross_entropy(logits, tgt),
        "linear_fwd_nobias": lambda: lin(xin),
        "linear_fwd_bias": lambda: linb(xin),
        "linear_fwd_autocast": lin_amp_fwd,
        "linear_fwd_bwd": lin_fwd_bwd,
    }
    for nt in (1, 10, 100, 1000):
        lst = [torch.ones(64, device=DEV) for _ in range(nt)]
        cases[f"foreach_add_scalar_{nt}"] = (lambda lst=lst: torch._foreach_add_(lst, 1.0))
        cases[f"foreach_norm_{nt}"] = (lambda lst=lst: torch._foreach_norm(lst))
    opt_cases = {}
    for nt in (10, 100, 1000):
        for impl in ("foreach", "fused", "forloop"):
            ps = [nn.Parameter(torch.randn(64, device=DEV)) for _ in range(nt)]
            for p in ps:
                p.grad = torch.randn(64, device=DEV)
            kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
            if DRY and impl == "fused":
                continue
            opt = torch.optim.AdamW(ps, lr=1e-4, **kw)
            opt_cases[f"adamw_{impl}_{nt}"] = opt.step
            if impl == "foreach":
                opt_cases[f"clip_grad_norm_{nt}"] = (lambda ps=ps: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True))
    res = {}
    for name, fn in list(cases.items()) + list(opt_cases.items()):
        n = N if not name.startswith(("adamw", "clip", "foreach_")) else max(50, N // 20)
        if name.endswith("_1000"):
            n = max(20, N // 100)
        issue, total = timeit(fn, n)
        ops = count_ops(fn)
        res[name] = {"issue_s": issue, "total_s": total, "n": n, "ops": len(ops),
                     "op_names": sorted(set(ops)), "op_list": ops if len(ops) <= 60 else ops[:60]}
        print(f"{name:28s} issue {issue*1e6:8.2f} us  total {total*1e6:8.2f} us  ops {len(ops)}", flush=True)
    # synchronisation round trips
    sync()
    t0 = time.perf_counter()
    for _ in range(200):
        sync()
    res["synchronize_idle"] = {"issue_s": (time.perf_counter() - t0) / 200}
    t0 = time.perf_counter()
    for _ in range(200):
        a.item()
    res["item_roundtrip"] = {"issue_s": (time.perf_counter() - t0) / 200}
    t0 = time.perf_counter()
    for _ in range(200):
        a.add_(b)
        sync()
    res["launch_plus_sync"] = {"issue_s": (time.perf_counter() - t0) / 200}
    with open(f"{out_dir()}/host.json", "w") as f:
        json.dump(res, f, indent=1)
    print({k: round(v["issue_s"] * 1e6, 2) for k, v in res.items() if k in ("synchronize_idle", "item_roundtrip", "launch_plus_sync")})


if __name__ == "__main__":
    main()
