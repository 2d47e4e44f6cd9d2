"""A small DeepSpeed training program, written as for `deepspeed train.py --deepspeed_config ds.json`: it
takes DeepSpeed's launcher argument --local_rank, its config from a JSON file, and reports what it got."""

import argparse
import json
import os
import time

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1, help="passed by DeepSpeed's launcher")
parser.add_argument("--deepspeed_config", required=True)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

deepspeed.init_distributed()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=args.deepspeed_config)
x = torch.randn(engine.train_micro_batch_size_per_gpu(), 512, device=engine.device, dtype=torch.bfloat16)
for step in range(args.steps):
    start = time.perf_counter()
    loss = engine(x).float().pow(2).mean()
    engine.backward(loss)
    engine.step()
    torch.cuda.synchronize()
    print(f"step {step}: {(time.perf_counter() - start) * 1e3:.3f} ms")
print("DS " + json.dumps({
    "rank": dist.get_rank(), "world_size": dist.get_world_size(), "local_rank_argument": args.local_rank,
    "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK",
                                            "CROSS_SIZE", "CUDA_VISIBLE_DEVICES")},
    "device": str(engine.device), "zero_stage": engine.zero_optimization_stage(), "bf16": engine.bfloat16_enabled()}))
