"""A small training job that fails on purpose (tests/integration/test_faults.py): every rank runs DataLoader
workers (processes that must not outlive it); `--raise-rank R` raises on rank R between two all_reduces of step
1, `--spin-rank R` loops forever there while the others wait in the all_reduce; `--pg-timeout S` is the process
group's timeout (init_process_group(timeout=...))."""
import argparse
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--raise-rank", type=int, default=None)
parser.add_argument("--spin-rank", type=int, default=None)
parser.add_argument("--pg-timeout", type=float, default=None)
args = parser.parse_args()

dist.init_process_group("nccl", timeout=None if args.pg_timeout is None else timedelta(seconds=args.pg_timeout))
rank = dist.get_rank()
torch.cuda.set_device(rank % torch.cuda.device_count())
model = torch.nn.Linear(256, 256, device="cuda")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(64, 256)), batch_size=8, num_workers=2, persistent_workers=True)

for step, (batch,) in enumerate(data):
    loss = model(batch.cuda()).square().mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        if step == 1 and rank == args.raise_rank:
            raise ValueError(f"rank {rank} fails on purpose at step {step}")
        while step == 1 and rank == args.spin_rank:
            pass
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.synchronize()
    print(f"step {step}", flush=True)
dist.destroy_process_group()
