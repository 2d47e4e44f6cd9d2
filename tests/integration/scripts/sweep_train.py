"""A tiny training loop for the sweep's tests: an MLP, Adam, --steps steps of --batch rows; prints its tokens/s
(rows/s) from the simulated clock. --hold-gib keeps that much GPU memory allocated, to make a point run out."""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--dim", type=int, default=1024)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--hold-gib", type=int, default=0)
p.add_argument("--bf16", action="store_true")
args = p.parse_args()
dtype = torch.bfloat16 if args.bf16 else torch.float32
held = [torch.empty(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(args.hold_gib)]
model = torch.nn.Sequential(torch.nn.Linear(args.dim, 4 * args.dim), torch.nn.GELU(),
                            torch.nn.Linear(4 * args.dim, args.dim)).to("cuda", dtype)
optimizer = torch.optim.Adam(model.parameters())
x = torch.randn(args.batch, args.dim, device="cuda", dtype=dtype)
for step in range(args.steps):
    start = time.perf_counter()
    loss = model(x).float().square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    loss.item()
    print(f"step {step} | tokens/s: {args.batch / (time.perf_counter() - start):.1f}", flush=True)
