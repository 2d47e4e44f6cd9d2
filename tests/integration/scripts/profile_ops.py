"""A few ops with shapes the shipped H200 database has never seen (tests/integration/test_profile.py)."""

import time

import torch
import torch.nn.functional as F

x = torch.randn(37, 53, device="cuda")
w = torch.randn(53, 29, device="cuda")
emb = torch.nn.Embedding(1000, 24).cuda()
idx = torch.randint(0, 1000, (8, 13), device="cuda")
target = torch.randint(0, 29, (37,), device="cuda")
start = time.perf_counter()
for _ in range(3):
    y = x @ w
    z = torch.sqrt(y.abs() + 1)
    e = emb(idx)
    loss = F.cross_entropy(z, target)
    v = x[:, 1:].contiguous()
torch.cuda.synchronize()
print(f"ELAPSED {time.perf_counter() - start:.9f}")
