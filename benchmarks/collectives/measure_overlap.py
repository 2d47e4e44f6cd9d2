"""Compute/communication overlap on real GPUs: how much a kernel and an NCCL collective slow
each other down when they run at the same time on one GPU (issue 4).

Launched with torchrun (one process per GPU); every rank does the same thing, so the collective
sees the same contention on every GPU, as in FSDP/TP training. For each compute kernel K (bf16
GEMMs of a few shapes, a memory-bound elementwise add) and each collective C (all_gather,
reduce_scatter, all_reduce; 64 and 256 MiB, bf16):
  alone:      K back to back on the default stream; C back to back from a side stream.
  concurrent: C enqueued from the side stream, then K on the default stream, both sized to run
              about --window-ms; per-iteration times taken with CUDA events, and only the
              iterations that lie entirely inside the window where both run are kept.
slowdown = median concurrent iteration time / median alone iteration time, for K and for C.

    torchrun --standalone --nproc_per_node=4 benchmarks/collectives/measure_overlap.py --out overlap_4.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.distributed as dist

from benchmarks.common.env import write_meta

MIB = 2**20


def compute_kernels(dev):
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=g)

    kernels = {}
    for m, k, n in [(8192, 8192, 8192), (4096, 4096, 14336), (16384, 2048, 2048)]:
        a, b = rand(m, k), rand(k, n)
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        kernels[f"gemm_{m}x{k}x{n}"] = ((lambda a=a, b=b, out=out: torch.mm(a, b, out=out)),
                                        {"kind": "gemm", "m": m, "k": k, "n": n, "flop": 2 * m * k * n})
    numel = 256 * MIB // 2  # 256 MiB bf16 operands: 768 MiB moved per add
    x, y, z = rand(numel), rand(numel), torch.empty(numel, device=dev, dtype=torch.bfloat16)
    kernels["add_256MiB"] = ((lambda: torch.add(x, y, out=z)), {"kind": "elementwise_add", "bytes": 3 * numel * 2})
    return kernels


def collectives(dev, world):
    colls = {}
    for size in (64 * MIB, 256 * MIB):
        full = torch.randn(size // 2, device=dev, dtype=torch.bfloat16)
        shard = torch.randn(size // 2 // world, device=dev, dtype=torch.bfloat16)
        ar = torch.randn(size // 2, device=dev, dtype=torch.bfloat16)
        tag = f"{size // MIB}MiB"
        colls[f"all_gather_{tag}"] = (lambda full=full, shard=shard: dist.all_gather_into_tensor(full, shard, async_op=True),
                                      {"op": "all_gather", "bytes": size, "note": "bytes = gathered output"})
        colls[f"reduce_scatter_{tag}"] = (lambda full=full, shard=shard: dist.reduce_scatter_tensor(shard, full, async_op=True),
                                          {"op": "reduce_scatter", "bytes": size, "note": "bytes = input"})
        colls[f"all_reduce_{tag}"] = (lambda ar=ar: dist.all_reduce(ar, async_op=True),
                                      {"op": "all_reduce", "bytes": size})
    return colls


def enqueue_compute(fn, n):
    evs = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        evs.append((s, e))
    return evs


def enqueue_coll(fn, n, side):
    """Back-to-back collectives issued from `side`; returns the event after each one."""
    evs = []
    with torch.cuda.stream(side):
        first = torch.cuda.Event(enable_timing=True)
        first.record(side)
        evs.append(first)
        for _ in range(n):
            work = fn()
            work.wait()  # side stream waits for the collective (no host block)
            e = torch.cuda.Event(enable_timing=True)
            e.record(side)
            evs.append(e)
    return evs


def spans(ref, evs):
    return [(ref.elapsed_time(s), ref.elapsed_time(e)) for s, e in evs]


def coll_spans(ref, evs):
    t = [ref.elapsed_time(e) for e in evs]
    return list(zip(t[:-1], t[1:]))


def sync_all():
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--window-ms", type=float, default=40.0)
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        write_meta(os.path.dirname(os.path.abspath(a.out)), __file__)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    side = torch.cuda.Stream()
    kernels, colls = compute_kernels(dev), collectives(dev, world)

    def time_compute(fn, n):
        sync_all()
        ref = torch.cuda.Event(enable_timing=True)
        ref.record()
        evs = enqueue_compute(fn, n)
        torch.cuda.synchronize()
        return [b - s for s, b in spans(ref, evs)]

    def time_coll(fn, n):
        sync_all()
        ref = torch.cuda.Event(enable_timing=True)
        ref.record()
        evs = enqueue_coll(fn, n, side)
        torch.cuda.synchronize()
        return [b - s for s, b in coll_spans(ref, evs)]

    # warm-up every kernel and collective (NCCL communicators, cuBLAS heuristics)
    for fn, _ in kernels.values():
        time_compute(fn, 5)
    for fn, _ in colls.values():
        time_coll(fn, 5)
    alone_k = {name: time_compute(fn, 30) for name, (fn, _) in kernels.items()}
    alone_c = {name: time_coll(fn, 20) for name, (fn, _) in colls.items()}
    med = statistics.median
    results = []
    for cname, (cfn, cinfo) in colls.items():
        for kname, (kfn, kinfo) in kernels.items():
            tk, tc = med(alone_k[kname]), med(alone_c[cname])
            counts = torch.tensor([max(8, math.ceil(a.window_ms / tk)), max(4, math.ceil(a.window_ms / tc))], device=dev)
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)  # every rank must issue the same number of collectives
            nk, nc = counts.tolist()
            sync_all()
            ref = torch.cuda.Event(enable_timing=True)
            ref.record()
            cev = enqueue_coll(cfn, nc, side)  # collectives first (side stream), then compute
            kev = enqueue_compute(kfn, nk)
            torch.cuda.synchronize()
            ks, cs = spans(ref, kev), coll_spans(ref, cev)
            lo, hi = max(ks[0][0], cs[0][0]), min(ks[-1][1], cs[-1][1])
            kin = [e - s for s, e in ks if s >= lo and e <= hi]
            cin = [e - s for s, e in cs if s >= lo and e <= hi]
            row = {
                "collective": cname, **{f"coll_{k}": v for k, v in cinfo.items()},
                "compute": kname, **{f"compute_{k}": v for k, v in kinfo.items()},
                "compute_alone_ms": tk, "coll_alone_ms": tc,
                "compute_concurrent_ms": med(kin) if kin else None, "coll_concurrent_ms": med(cin) if cin else None,
                "compute_slowdown": med(kin) / tk if kin else None, "coll_slowdown": med(cin) / tc if cin else None,
                "n_compute_in_window": len(kin), "n_coll_in_window": len(cin), "window_ms": hi - lo,
                "compute_concurrent_all_ms": kin, "coll_concurrent_all_ms": cin,
            }
            results.append(row)
            if rank == 0:
                print(f"{cname:<22} {kname:<22} compute {tk:7.3f} -> {row['compute_concurrent_ms'] or float('nan'):7.3f} ms "
                      f"(x{row['compute_slowdown'] or float('nan'):.3f})   coll {tc:7.3f} -> "
                      f"{row['coll_concurrent_ms'] or float('nan'):7.3f} ms (x{row['coll_slowdown'] or float('nan'):.3f})  "
                      f"[{len(kin)}/{len(cin)} in {hi - lo:.0f} ms]", flush=True)
            if rank == 0:
                save(a.out, world, alone_k, alone_c, results, done=False)
    if rank == 0:
        save(a.out, world, alone_k, alone_c, results, done=True)
    dist.destroy_process_group()


def save(path, world, alone_k, alone_c, results, done):
    med = statistics.median
    if True:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        env = {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")}
        out = {"complete": done,
            "what": "compute/communication overlap slowdowns (see benchmarks/collectives/measure_overlap.py)",
            "world": world, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "nccl": nccl,
            "cuda": torch.version.cuda, "env": env, "measured_unix": time.time(),
            "alone_compute_ms": {k: {"median": med(v), "min": min(v), "max": max(v), "all": v} for k, v in alone_k.items()},
            "alone_coll_ms": {k: {"median": med(v), "min": min(v), "max": max(v), "all": v} for k, v in alone_c.items()},
            "pairs": results,
        }
        with open(path + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
