"""A program's own Triton kernel launched on simulated CUDA tensors (runtime/triton_kernels.py Note [Triton
kernels]): one kernel on the stream, an unmodelled op, the values it may write forgotten."""

import json

import torch
import triton
import triton.language as tl


@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
out = torch.zeros_like(x)
flags = torch.tensor([1, 2, 3], device="cuda")  # small host data: its values are known until the GPU writes it
before = flags.tolist()
add_one_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
add_one_kernel[lambda meta: (triton.cdiv(3, meta["BLOCK"]),)](flags, flags, 3, BLOCK=1024)
torch.cuda.synchronize()
print("PROBE", json.dumps({"before": before, "after": flags.tolist()}))
