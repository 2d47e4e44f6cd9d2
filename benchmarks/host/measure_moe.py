"""Host cost of the calls a mixture-of-experts layer makes, on the GPU machine's CPU (no profiler).

Run with torchrun on 2+ GPUs (the all-to-alls need peers). For each case: warm up, then N calls back to
back; host time per call = perf_counter over the N calls / N, without synchronising inside (a case that
synchronises by itself, such as bincount or tolist, includes its wait for the GPU, which is idle here).
Cases:
- GEMMs whose row count changes from call to call (expert inputs) against a repeated shape: cuBLASLt
  chooses an algorithm per new shape;
- bincount (CUDA's reads the input's min and max on the host), stable argsort, indexing with a long index;
- functional all_to_all_single of counts + tolist, all_to_all_single_autograd of tokens + wait.
Rank 0 writes $OUT/moe_host.json: {case: {"host_us": median over repeats, "repeats": [...]}}.
"""

import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

BF16 = torch.bfloat16
QUICK_N = int(os.environ.get("PH_QUICK_N", "0"))  # fewer calls per case (a check run, or under Phantora)


def per_call_us(fn, n: int, repeats: int = 5) -> list[float]:
    for i in range(min(50, n)):
        fn(i)
    torch.cuda.synchronize()
    out = []
    for r in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            fn(n * (r + 1) + i)
        out.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return out


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    group = dist.group.WORLD
    dev = "cuda"
    w = torch.randn(256, 256, device=dev, dtype=BF16)
    xs = {m: torch.randn(m, 256, device=dev, dtype=BF16) for m in range(1024, 1024 + 4096)}
    big_w = torch.randn(2048, 4096, device=dev, dtype=BF16)
    big_x = torch.randn(8192, 2048, device=dev, dtype=BF16)
    flat = torch.randint(0, 8, (16384,), device=dev)
    long_index = torch.randint(0, 8192, (16384,), device=dev)
    tokens = torch.randn(8192, 2048, device=dev)
    counts = torch.full((8,), 16384 // 8, device=dev, dtype=torch.int64)
    even = [16384 // world] * world
    routed = torch.randn(16384, 2048, device=dev, requires_grad=True)

    cases = {
        "mm_same_shape_256": lambda i: xs[2048] @ w,
        "mm_new_rows_256": lambda i: xs[1024 + i % 4096] @ w,  # a row count not seen for 4096 calls
        "mm_cycle8_rows_256": lambda i: xs[2048 + 16 * (i % 8)] @ w,  # 8 row counts in turn
        "mm_new_rows_expert": lambda i: big_x[:4096 + i % 512] @ big_w,  # expert-sized, GPU-bound
        "bincount_16k": lambda i: torch.bincount(flat, minlength=8),
        "argsort_stable_16k": lambda i: flat.argsort(stable=True),
        "index_rows_16k": lambda i: tokens[long_index],
        "a2a_counts_tolist": lambda i: fc.all_to_all_single(counts, None, None, group).tolist(),
        "a2a_tokens_autograd_wait": lambda i: fc.wait_tensor(
            fc.all_to_all_single_autograd(routed, even, even, group)),
        "split_8": lambda i: routed.split([2048] * 8),
        "cat_4": lambda i: torch.cat([routed[:1024], routed[1024:2048], routed[2048:3072], routed[3072:4096]]),
    }
    small = torch.randn(64, 256, device=dev)
    act = fc.all_to_all_single(small, None, None, group)  # an AsyncCollectiveTensor, waited once
    fc.wait_tensor(act)
    plain = small.clone()
    out_small = torch.empty_like(small)
    uneven = [[64 - 8 * (world - 1)] + [8] * (world - 1), [8] * (world - 1) + [64 - 8 * (world - 1)]]
    cases.update({
        "a2a_small_even_wait": lambda i: fc.wait_tensor(fc.all_to_all_single_autograd(small, None, None, group)),
        "a2a_small_uneven_wait": lambda i: fc.wait_tensor(fc.all_to_all_single_autograd(
            small, uneven[i % 2], uneven[i % 2], group)),
        "a2a_small_no_wait": lambda i: fc.all_to_all_single_autograd(small, None, None, group),
        "c10d_a2a_small": lambda i: dist.all_to_all_single(out_small, small),
        "plain_add": lambda i: plain + 1,
        "act_add": lambda i: act + 1,  # AsyncCollectiveTensor's Python dispatch, no wait left
        "act_split_8": lambda i: act.split(8),
        "act_cat_2": lambda i: torch.cat([act[:32], act[32:]]),
    })
    results = {}
    sizes = {"mm_new_rows_expert": 200, "a2a_tokens_autograd_wait": 200, "index_rows_16k": 500}
    # cuBLAS algorithm selection: GEMMs of row counts this process has not run, by problem size and
    # layout; each case runs 300 new row counts, then the same 300 again (all seen: `_seen`)
    weights = {(k, n): torch.randn(k, n, device=dev, dtype=BF16) for k, n in ((2048, 4096), (4096, 2048), (1024, 1024))}
    rows = torch.randn(8192, 4096, device=dev, dtype=BF16)
    grad = torch.randn(8192, 4096, device=dev, dtype=BF16)
    base = iter(range(10_000, 10_000_000, 1000))
    for label, lo, fn in (
            ("fwd_2048x4096_m64", 64, lambda m, k=2048, n=4096: rows[:m, :k] @ weights[(k, n)]),
            ("fwd_2048x4096_m3900", 3900, lambda m, k=2048, n=4096: rows[:m, :k] @ weights[(k, n)]),
            ("fwd_4096x2048_m3900", 3900, lambda m, k=4096, n=2048: rows[:m, :k] @ weights[(k, n)]),
            ("fwd_1024x1024_m1000", 1000, lambda m, k=1024, n=1024: rows[:m, :k] @ weights[(k, n)]),
            ("dgrad_nt_m3900", 3900, lambda m: grad[:m, :4096] @ weights[(2048, 4096)].t()),
            ("wgrad_tn_k3900", 3900, lambda m: rows[:m, :2048].t() @ grad[:m, :4096]),
            ("fwd_fp32_1024x1024_m1000", 1000, lambda m: rows[:m, :1024].float() @ weights[(1024, 1024)].float())):
        ms = list(range(lo + next(base) % 7, lo + 300))  # a fresh offset so no case sees another's shapes
        for phase in ("new", "seen"):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for m in ms:
                fn(m)
            us = (time.perf_counter() - t0) / len(ms) * 1e6
            torch.cuda.synchronize()
            total = (time.perf_counter() - t0) / len(ms) * 1e6
            results[f"gemm_{label}_{phase}"] = {"host_us": us, "with_drain_us": total, "repeats": [round(us, 2)]}
            if rank == 0:
                print(f"gemm_{label}_{phase:5} {us:9.1f} us (with drain {total:.1f})", flush=True)
    for name, fn in cases.items():
        reps = per_call_us(fn, QUICK_N or sizes.get(name, 1000))
        results[name] = {"host_us": statistics.median(reps), "repeats": [round(r, 2) for r in reps]}
        if rank == 0:
            print(f"{name:28} {results[name]['host_us']:9.1f} us  {results[name]['repeats']}", flush=True)
    if os.environ.get("PH_PROFILE_A2A"):  # where a functional all-to-all's host time goes
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(20):
                y = fc.all_to_all_single_autograd(small, None, None, group)
                z = torch.cat([y[:32], y[32:]])
        if rank == 0:
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
    if rank == 0:
        out = os.environ.get("OUT", ".")
        with open(os.path.join(out, "moe_host.json"), "w") as f:
            json.dump({"torch": torch.__version__, "world": world, "cases": results}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
