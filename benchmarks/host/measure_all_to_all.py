"""Host cost of an all-to-all with even and uneven splits, per API layer, on the GPU machine's CPU.

Run with torchrun on 2+ GPUs. Each case: warm up, then N calls back to back, host time per call =
perf_counter over the N calls / N, no synchronize inside (the GPU keeps up: small messages). The same
message size each way; "uneven" gives rank-dependent split lists (as a mixture-of-experts dispatch
does), "even" the same data with no split lists. Layers: c10d (`dist.all_to_all_single` into a given
output), the functional collective (`_functional_collectives.all_to_all_single`, then its wait), and its
autograd variant (`all_to_all_single_autograd`, then its wait); and a trivial custom autograd Function's
`apply` against the view it returns. A host-speed probe runs before and after.
Rank 0 writes $OUT/a2a_host.json: {case: {"host_us": median over repeats, "repeats": [...]}, "probe": ...}.
"""

import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from benchmarks.common.host_probe import probe_apart

N = int(os.environ.get("PH_QUICK_N", "500"))


class _Identity(torch.autograd.Function):
    """The cheapest custom autograd Function: what `Function.apply` costs by itself."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        return grad


def per_call_us(fn, n: int, repeats: int = 5) -> list[float]:
    for i in range(min(50, n)):
        fn(i)
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        out.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return out


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    group = dist.group.WORLD
    rows = 64 * world
    x = torch.randn(rows, 256, device="cuda")
    xg = x.clone().requires_grad_(True)
    out = torch.empty_like(x)
    # rank-dependent splits that sum to `rows` both ways: rank r sends 64 + d[(s - r) % world] rows to rank s
    d = [8, -8] + [0] * (world - 2)
    send = [64 + d[(s - rank) % world] for s in range(world)]
    recv = [64 + d[(rank - s) % world] for s in range(world)]
    cases = {
        "c10d_even": lambda i: dist.all_to_all_single(out, x),
        "c10d_uneven": lambda i: dist.all_to_all_single(out, x, recv, send),
        "functional_even_wait": lambda i: fc.wait_tensor(fc.all_to_all_single(x, None, None, group)),
        "functional_uneven_wait": lambda i: fc.wait_tensor(fc.all_to_all_single(x, recv, send, group)),
        "autograd_even_wait": lambda i: fc.wait_tensor(fc.all_to_all_single_autograd(xg, None, None, group)),
        "autograd_uneven_wait": lambda i: fc.wait_tensor(fc.all_to_all_single_autograd(xg, recv, send, group)),
        "autograd_uneven_split": lambda i: fc.all_to_all_single_autograd(xg, recv, send, group).split(recv),
        "view_as": lambda i: xg.view_as(xg),
        "function_apply_identity": lambda i: _Identity.apply(xg),
    }
    results = {"world": world, "torch": torch.__version__, "probe_before": probe_apart("a2a") if rank == 0 else {}}
    for name, fn in cases.items():
        reps = per_call_us(fn, N)
        results[name] = {"host_us": statistics.median(reps), "repeats": [round(r, 2) for r in reps]}
        if rank == 0:
            print(f"{name:26s} {statistics.median(reps):8.1f} us  {[round(r, 1) for r in reps]}", flush=True)
    if rank == 0:
        results["probe_after"] = probe_apart("a2a")
        out_dir = os.environ.get("OUT", ".")
        with open(os.path.join(out_dir, "a2a_host.json"), "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
