"""Ops a GPU runs as one fused kernel, as TorchTitan's Llama calls them: nn.RMSNorm and grouped-query
attention (8 key/value heads for 32 query heads), forward and backward, on bf16 CUDA tensors; attention on
float32 inputs under bf16 autocast (Hugging Face Llama's queries after RoPE), and under `sdpa_kernel`."""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

x = torch.randn(2, 1024, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
norm = nn.RMSNorm(4096, device="cuda", dtype=torch.bfloat16)
norm(x).sum().backward()

q = torch.randn(2, 32, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
v = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
before = torch.cuda.memory_allocated()
o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
saved = torch.cuda.memory_allocated() - before
o.sum().backward()
with torch.autocast("cuda", dtype=torch.bfloat16):
    q32 = torch.randn(2, 8, 256, 64, device="cuda")
    autocast_dtype = F.scaled_dot_product_attention(q32, q32, q32, is_causal=True).dtype
with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
torch.cuda.synchronize()
print("PROBE", json.dumps({"attention_saved_bytes": saved, "output_bytes": o.numel() * o.element_size(),
                           "k_grad": list(k.grad.shape), "autocast_dtype": str(autocast_dtype)}))
