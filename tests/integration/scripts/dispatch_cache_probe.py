"""Ops whose outputs alias their inputs in every way a training step does, repeated so that the dispatch cache
(runtime/dispatch_cache.py) serves them: views, in-place ops, `out=`, tuple results, tied weights, autocast,
a storage freed and re-allocated as FSDP does, known values, a fused and a foreach optimizer. Prints `CACHE {json}`: the
cache's size, and what the program saw (shapes, strides, storage sharing, versions, memory)."""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack


class Tied(nn.Module):
    def __init__(self, vocab: int = 512, dim: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 3 * dim)) for _ in range(2))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            q, k, v = block(x).chunk(3, dim=-1)
            heads = lambda t: t.view(*t.shape[:2], 4, -1).transpose(1, 2)  # noqa: E731
            attention = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
            x = x + attention.transpose(1, 2).reshape(x.shape)
        return self.head(x)


def aliasing(seen: list) -> None:
    """Views, in-place ops and `out=`: what each result shares with its input."""
    base = torch.zeros(16, 32, device="cuda")
    row = base[3]
    before = base._version
    row.add_(1.0)
    t = base.t()
    parts = base.split([5, 11])
    out = torch.empty(16, 32, device="cuda")
    torch.mul(base, 2.0, out=out)
    seen.append([base._version - before, row.data_ptr() - base.data_ptr(), t.stride(), t.is_contiguous(),
                 [p.shape[0] for p in parts], parts[1].storage_offset(), out.data_ptr() != base.data_ptr(),
                 t.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), row._base is base])


def resized_storage(seen: list) -> None:
    """FSDP2's free and re-allocation of a parameter's storage, with views of it."""
    flat = torch.empty(4096, device="cuda")
    view = flat.view(64, 64)
    storage = flat.untyped_storage()
    size = storage.size()
    storage.resize_(0)
    allocated = torch.cuda.memory_allocated()
    storage.resize_(size)
    again = flat.view(64, 64)
    seen.append([allocated, torch.cuda.memory_allocated(), again.shape, view.data_ptr() == again.data_ptr()])


def main() -> None:
    torch.manual_seed(0)
    model = Tied().cuda()
    fused = torch.optim.AdamW(model.blocks.parameters(), lr=1e-3, fused=True)
    foreach = torch.optim.AdamW(model.embed.parameters(), lr=1e-3, foreach=True)  # lists of new tensors
    tokens = torch.randint(0, 512, (4, 64), device="cuda")
    seen: list = []
    for _ in range(4):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(tokens).flatten(0, 1).float(), tokens.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for optimizer in (fused, foreach):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        aliasing(seen)
        resized_storage(seen)
        known = (torch.arange(8, device="cuda") * 3).tolist()
        seen.append([known, model.head.weight is model.embed.weight, torch.cuda.max_memory_allocated()])
    mode = next(m for m in _get_current_dispatch_mode_stack() if type(m).__name__ == "HybridMode")
    cache = mode.fake_mode.dispatch_cache
    print("CACHE " + json.dumps({"entries": 0 if cache is None else len(cache), "seen": seen}, default=str))


if __name__ == "__main__":
    main()
