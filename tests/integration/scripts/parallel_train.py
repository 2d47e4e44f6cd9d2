"""A small model trained with one of DDP, FSDP2, FSDP2 x TP (2-D mesh) or pipeline parallelism."""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def model(dim: int, layers: int) -> nn.Sequential:
    return nn.Sequential(*[Block(dim) for _ in range(layers)])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp", "fsdp_tp", "pp"], required=True)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--accum", type=int, default=1)
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())  # the rank's GPU on its node
    x = torch.randn(8, 256, a.dim, device="cuda")
    net = model(a.dim, a.layers).cuda()
    if a.mode == "ddp":
        net = nn.parallel.DistributedDataParallel(net)
    elif a.mode == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in net:
            fully_shard(block, mp_policy=mp)
        fully_shard(net, mp_policy=mp)
    elif a.mode == "fsdp_tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        mesh = init_device_mesh("cuda", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        for block in net:
            parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(net, mesh=mesh["dp"])
    if a.mode == "pp":
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
        per_stage = a.layers // world
        stage_module = nn.Sequential(*list(net)[rank * per_stage:(rank + 1) * per_stage])
        stage = PipelineStage(stage_module, rank, world, torch.device("cuda", rank))
        schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=lambda out, y: out.float().square().mean())
        params = stage_module.parameters()
    else:
        params = net.parameters()
    opt = torch.optim.AdamW(params, lr=1e-4)
    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if a.mode == "pp":
            if rank == 0:
                schedule.step(x)
            elif rank == world - 1:
                schedule.step(target=x)
            else:
                schedule.step()
        else:
            for micro in range(a.accum):
                last = micro == a.accum - 1
                if a.mode == "ddp" and not last:
                    with net.no_sync():
                        net(x).float().square().mean().backward()
                else:
                    net(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    print("RESULT " + json.dumps({"rank": rank, "step_ms": times,
                                  "peak_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
