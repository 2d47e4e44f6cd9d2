"""FSDP2 with reshard_after_forward frees each layer's unsharded parameters after its forward.

A stack of bias-free Linear layers, each `fully_shard`ed with bf16 compute: prints per-rank memory
readings (bytes) as `MEM {json}` so the test can compare them with what the caching allocator holds.
"""
import json

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

DIM, LAYERS, TOKENS = 4096, 8, 16


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    net = nn.Sequential(*[nn.Linear(DIM, DIM, bias=False) for _ in range(LAYERS)]).cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in net:
        fully_shard(layer, mp_policy=mp)
    fully_shard(net, mp_policy=mp)
    x = torch.randn(TOKENS, DIM, device="cuda")
    readings = {}
    for step in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        y = net(x)
        torch.cuda.synchronize()
        readings[step] = {"before": before, "after_forward": torch.cuda.memory_allocated(),
                          "peak_forward": torch.cuda.max_memory_allocated()}
        y.float().sum().backward()
        torch.cuda.synchronize()
        readings[step]["after_backward"] = torch.cuda.memory_allocated()
        del y
        for p in net.parameters():
            p.grad = None
    print("MEM " + json.dumps({"world": dist.get_world_size(), "dim": DIM, "layers": LAYERS,
                               "tokens": TOKENS, "steps": readings}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
