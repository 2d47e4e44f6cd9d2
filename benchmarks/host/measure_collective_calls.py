"""Host cost of one c10d collective call from Python (`torch.distributed.all_reduce(t)` and the rest), on the GPU
machine's CPU: what the host model's `collective_ns` charges (models/host.py).

    torchrun --nproc_per_node=2 -m benchmarks.host.measure_collective_calls     # writes $OUT/collective_calls.json

Each case: warm-up calls, then REPEATS times N calls, timed one by one with `perf_counter` around the call alone,
the median per repeat. Before each repeat the current stream sleeps (`torch.cuda._sleep`) longer than the repeat
takes, so that the collectives queue behind it and the host never waits for the GPU: the time is the call's own.
Two ways around each call:

- `tight`: calls back to back, the interpreter's and the CPU's caches warm, as a micro-benchmark sees them;
- `in_situ`: a filler between calls (a pure-Python walk over a few MiB of objects, as a framework's Python between
  two collectives walks its modules and hooks) that leaves the caches as a training step leaves them; only the
  call is timed.

Cases: all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single (returning when
enqueued, the default), all_reduce with `async_op=True` and its `wait()`, and a send/recv pair; each at a small and
a large message (the host's work does not depend on it). A host-speed probe (benchmarks/common/host_probe.py) runs
before and after, to bring the times to the reference host.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Callable

import torch
import torch.distributed as dist

from benchmarks.common.host_probe import probe_apart

N = int(os.environ.get("PH_QUICK_N", "200"))
REPEATS = 5
WARMUP = 20
SIZES = {"64KiB": 64 << 10, "16MiB": 16 << 20}
SLEEP_CYCLES = int(2e9)
"""About a second of GPU clock: longer than a repeat's calls and fillers take on the host."""
FILLER_OBJECTS = 60_000


class _Node:
    __slots__ = ("value", "next")

    def __init__(self, value: int, nxt: "_Node | None") -> None:
        self.value, self.next = value, nxt


def _filler_chain() -> _Node:
    """A linked chain of objects spread over a few MiB, built in shuffled order so that a walk misses the caches."""
    nodes = [_Node(i, None) for i in range(FILLER_OBJECTS)]
    order = list(range(FILLER_OBJECTS))
    seed = 12345
    for i in range(len(order) - 1, 0, -1):  # Fisher-Yates with a fixed LCG: the same chain on every rank
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        j = seed % (i + 1)
        order[i], order[j] = order[j], order[i]
    for a, b in zip(order, order[1:]):
        nodes[a].next = nodes[b]
    return nodes[order[0]]


def _walk(head: _Node) -> int:
    total, node = 0, head
    while node is not None:
        total += node.value
        node = node.next
    return total


def per_call_us(call: Callable[[], object], filler: Callable[[], object] | None) -> list[float]:
    """The median host time of one call, per repeat."""
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    medians = []
    for _ in range(REPEATS):
        dist.barrier()
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        times = []
        for _ in range(N):
            if filler is not None:
                filler()
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times) * 1e6)
        torch.cuda.synchronize()
    return medians


def cases(rank: int, world: int, numel: int) -> dict[str, Callable[[], object]]:
    x = torch.ones(numel, device="cuda", dtype=torch.bfloat16)
    gathered = torch.empty(numel * world, device="cuda", dtype=torch.bfloat16)
    shard = torch.empty(numel // world, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    peer = rank ^ 1

    def async_all_reduce() -> None:
        dist.all_reduce(x, async_op=True).wait()

    def send_recv() -> None:  # even ranks send first; a pair per call
        if rank % 2 == 0:
            dist.send(x, peer)
        else:
            dist.recv(out, peer)

    found = {
        "all_reduce": lambda: dist.all_reduce(x),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(gathered, x),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(shard, x),
        "broadcast": lambda: dist.broadcast(x, 0),
        "all_to_all_single": lambda: dist.all_to_all_single(out, x),
        "all_reduce_async_wait": async_all_reduce,
    }
    if world % 2 == 0:
        found["send_or_recv"] = send_recv
    return found


def main() -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    head = _filler_chain()
    filler_alone = per_call_us(lambda: _walk(head), None)
    results: dict = {"world": world, "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                     "n": N, "filler_objects": FILLER_OBJECTS, "filler_us": statistics.median(filler_alone),
                     "probe_before": probe_apart("collective_calls") if rank == 0 else {}, "cases": {}}
    for size_name, nbytes in SIZES.items():
        for name, call in cases(rank, world, nbytes // 2).items():
            for mode, filler in (("tight", None), ("in_situ", lambda: _walk(head))):
                reps = per_call_us(call, filler)
                key = f"{name}/{size_name}/{mode}"
                results["cases"][key] = {"host_us": statistics.median(reps), "repeats": [round(r, 2) for r in reps]}
                if rank == 0:
                    print(f"{key:44s} {statistics.median(reps):8.1f} us  {[round(r, 1) for r in reps]}", flush=True)
    if rank == 0:
        results["probe_after"] = probe_apart("collective_calls")
        with open(os.path.join(os.environ.get("OUT", "."), "collective_calls.json"), "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
