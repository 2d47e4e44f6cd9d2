"""Time NCCL collectives through torch.distributed, one process per GPU, in nccl-tests' conventions.

    torchrun --standalone --nproc_per_node=N -m benchmarks.collectives.measure_nccl --out DIR [--back-to-back]

For each op and size (64 KiB to 1 GiB, x4), rank 0 writes one line to DIR/nccl_N.jsonl:
{"op", "world", "bytes", "seconds"}, the same shape as data/h200/collectives/nccl/. `bytes` follows
nccl-tests (models/network/nccl.py SIZE_CONVENTION): all_reduce/broadcast the tensor, all_gather the
gathered output, reduce_scatter the full input, all_to_all each rank's whole input, sendrecv the
message each rank sends to the next (and receives from the previous). `seconds` is the median over
`--iters` calls, each started alone and timed by CUDA events around it, after `--warmup` calls, the
slowest rank's: a call in isolation, as the network model predicts one. With `--back-to-back`, the mean
of `--iters` calls issued one after another between two events (nccl-tests' way): each call's launch and
synchronization then hide behind the previous one, so small messages read lower.
Set NCCL_NVLS_ENABLE=0 as the measuring machines require (and as the H200 reference was taken).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from benchmarks.common.env import write_meta

SIZES = tuple(64 << 10 << (2 * i) for i in range(8))  # 64 KiB, 256 KiB, ..., 1 GiB
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv")


def _call(op: str, size: int, world: int, rank: int) -> Callable[[], None]:
    """One collective of `size` bytes (nccl-tests' meaning) on bf16 buffers allocated once."""
    elems = size // 2
    dev = torch.device("cuda", torch.cuda.current_device())

    def buf(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16, device=dev)

    if op == "all_reduce":
        t = buf(elems)
        return lambda: dist.all_reduce(t)
    if op == "all_gather":
        out, inp = buf(elems), buf(elems // world)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if op == "reduce_scatter":
        inp, out = buf(elems), buf(elems // world)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if op == "broadcast":
        t = buf(elems)
        return lambda: dist.broadcast(t, src=0)
    if op == "all_to_all":
        inp, out = buf(elems), buf(elems)
        return lambda: dist.all_to_all_single(out, inp)
    if op == "sendrecv":
        send, recv = buf(elems), buf(elems)
        nxt, prv = (rank + 1) % world, (rank - 1) % world

        def sendrecv() -> None:
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]):
                w.wait()
        return sendrecv
    raise ValueError(f"unknown op {op}")


def _slowest(seconds: float) -> float:
    value = torch.tensor([seconds], device="cuda")
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def time_isolated(fn: Callable[[], None], iters: int) -> float:
    """Median seconds of one call started alone (every rank synchronized and at a barrier before it), timed by
    CUDA events around it on the calling stream."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def time_back_to_back(fn: Callable[[], None], iters: int) -> float:
    """Mean seconds per call of `iters` calls issued back to back between two CUDA events."""
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def time_call(fn: Callable[[], None], warmup: int, iters: int, back_to_back: bool) -> float:
    """Seconds of one call after `warmup` untimed ones, the slowest rank's, the same on every rank."""
    for _ in range(warmup):
        fn()
    return _slowest(time_back_to_back(fn, iters) if back_to_back else time_isolated(fn, iters))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for nccl_<world>.jsonl")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--back-to-back", action="store_true", help="mean of calls issued back to back (nccl-tests)")
    args = ap.parse_args()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for op in args.ops.split(","):
        for size in SIZES:
            fn = _call(op, size, world, rank)
            seconds = time_call(fn, args.warmup, args.iters, args.back_to_back)
            rows.append({"op": op, "world": world, "bytes": size, "seconds": seconds})
            if rank == 0:
                print(f"{op:<15} n={world} {size:>11} B {seconds * 1e6:10.1f} us", flush=True)
            del fn
            torch.cuda.empty_cache()
    if rank == 0:
        out = Path(args.out)
        write_meta(out, __file__)
        with open(out / f"nccl_{world}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
