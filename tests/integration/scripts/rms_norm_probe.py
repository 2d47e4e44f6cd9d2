"""nn.RMSNorm forward and backward on bf16 CUDA tensors, as TorchTitan's Llama runs it."""
import torch
import torch.nn as nn

x = torch.randn(2, 1024, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
norm = nn.RMSNorm(4096, device="cuda", dtype=torch.bfloat16)
norm(x).sum().backward()
torch.cuda.synchronize()
