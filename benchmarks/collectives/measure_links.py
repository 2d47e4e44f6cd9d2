"""How fast each pair of the machine's GPUs talks: CUDA peer access and copy bandwidth per ordered pair (one
process), and, under torchrun, NCCL all-reduce time per group (every pair, the whole machine) for a few sizes.

A collective over several GPUs runs at the pace of its slowest link, so a machine whose GPU pairs differ (a VM
where peer access between some GPUs is off and NCCL goes through host memory) gives step times no uniform
NVLink model predicts. Prints JSON lines; with NCCL_DEBUG=INFO the log names the transport of every channel.

    python -m benchmarks.collectives.measure_links copies
    torchrun --standalone --nproc-per-node 4 -m benchmarks.collectives.measure_links nccl
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys

import torch

SIZES_MIB = (1, 16, 64)


def copies() -> None:
    n = torch.cuda.device_count()
    for a, b in itertools.permutations(range(n), 2):
        src = torch.empty(64 << 20, dtype=torch.uint8, device=f"cuda:{a}")
        dst = torch.empty_like(src, device=f"cuda:{b}")
        times = []
        for _ in range(12):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(torch.cuda.current_stream(a))
            dst.copy_(src)
            end.record(torch.cuda.current_stream(a))
            torch.cuda.synchronize(a)
            torch.cuda.synchronize(b)
            times.append(start.elapsed_time(end))
        ms = statistics.median(times[2:])
        print(json.dumps({"what": "copy", "src": a, "dst": b, "peer_access": torch.cuda.can_device_access_peer(a, b),
                          "mib": 64, "ms": round(ms, 4), "gb_per_s": round((64 << 20) / ms / 1e6, 1)}), flush=True)


def nccl() -> None:
    import torch.distributed as dist
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    groups = [tuple(range(world))] + list(itertools.combinations(range(world), 2))
    made = [(g, dist.new_group(list(g))) for g in groups]  # every rank creates every group, in the same order
    for members, group in made:
        for mib in SIZES_MIB:
            if rank not in members:
                dist.barrier()
                continue
            x = torch.ones(mib << 19, dtype=torch.bfloat16, device="cuda")
            times = []
            for _ in range(15):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dist.all_reduce(x, group=group)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            if rank == members[0]:
                print(json.dumps({"what": "all_reduce", "group": list(members), "mib": mib,
                                  "ms": round(statistics.median(times[3:]), 4)}), flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    {"copies": copies, "nccl": nccl}[sys.argv[1]]()
