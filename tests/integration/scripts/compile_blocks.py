"""Blocks compiled one by one, as TorchTitan and llama_train.py --compile do: each compiled region's input is a
non-leaf tensor that requires grad (the eager embedding's output, then the previous block's)."""

import json

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


embedding = nn.Embedding(512, 128).cuda()
blocks = nn.ModuleList(torch.compile(Block(128).cuda()) for _ in range(2))
for _ in range(3):
    x = embedding(torch.randint(0, 512, (4, 64), device="cuda"))
    for block in blocks:
        x = block(x)
    x.float().pow(2).mean().backward()
torch.cuda.synchronize()
print("BLOCKS " + json.dumps({"grad": list(blocks[0].up.weight.grad.shape)}))
