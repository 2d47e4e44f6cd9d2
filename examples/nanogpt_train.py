"""A small nanoGPT-style training script, the kind Phantora runs unmodified.

Plain PyTorch: a GPT with tied embeddings, a DataLoader with worker processes and pinned
memory, bf16 autocast, fused AdamW, gradient clipping, and the usual timing with
`torch.cuda.synchronize()` + `time.perf_counter()`. It prints step time, tokens/s, MFU and
peak memory exactly as it would on a real GPU.

    phantora run --gpu h200 -- python examples/nanogpt_train.py
    python examples/nanogpt_train.py            # on a machine with a real GPU
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class RandomTokens(Dataset):
    """Synthetic token windows (a real script would read a tokenized corpus)."""

    def __init__(self, vocab: int, block: int, length: int = 10_000):
        self.vocab, self.block, self.length = vocab, block, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        chunk = torch.randint(0, self.vocab, (self.block + 1,), generator=g)
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, d: int, heads: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak of the GPU, for MFU")
    p.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                   help="torch.compile the model, as nanoGPT's train.py does (MODE: default, reduce-overhead, "
                        "max-autotune-no-cudagraphs, ...)")
    a = p.parse_args()

    torch.manual_seed(1337)
    device = "cuda"
    print(f"device: {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)")
    model = GPT(a.vocab, a.block, a.layers, a.d_model, a.heads).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params / 1e6:.1f}M")
    if a.compile:
        model = torch.compile(model, mode=a.compile)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    loader = DataLoader(RandomTokens(a.vocab, a.block), batch_size=a.batch, num_workers=a.workers,
                        pin_memory=True, shuffle=True)
    flops_per_token = 6 * n_params + 12 * a.layers * a.d_model * a.block

    batches = iter(loader)
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        tokens_per_s = a.batch * a.block / dt
        mfu = flops_per_token * tokens_per_s / (a.peak_tflops * 1e12)
        print(f"step {step}: loss {loss.item():.4f}, grad norm {norm.item():.3f}, {dt * 1000:.1f} ms, "
              f"{tokens_per_s:,.0f} tok/s, MFU {100 * mfu:.1f}%")
    print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, "
          f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB reserved")
    if not math.isfinite(loss.item()):
        raise SystemExit("loss diverged")


if __name__ == "__main__":
    main()
