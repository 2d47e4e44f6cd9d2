"""What a CUDA build of PyTorch answers in C++ that a CPU build does not (csrc Note [What the build knows]):
prints BUILD {json} when every path ran without failing on the missing CUDA driver."""

import json

import torch
import torch.nn as nn
import torch.nn.functional as F

lstm = nn.LSTM(32, 64, num_layers=2).cuda()  # flatten_parameters asks torch.backends.cudnn for its version
out, _ = lstm(torch.randn(5, 3, 32, device="cuda"))
out.sum().backward()

# head dim 20 is no multiple of 8: Phantora's SDPA routing leaves it to ATen's composite, whose backend
# choice on a CUDA build checks the cuDNN version
q = torch.randn(2, 4, 16, 20, device="cuda", requires_grad=True)
F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
half = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.bfloat16)
direct = torch.ops.aten.scaled_dot_product_attention(half, half, half)  # the aten op itself, as C++ callers reach it

print("BUILD " + json.dumps({
    "cuda_build": torch._C._has_cudnn,  # compiled with CUDA (and cuDNN): the wheels from the package index
    "cudnn_version": torch.backends.cudnn.version(),
    "config": torch.__config__.show(),  # asks the hooks for a CUDA section: a driver's, so none
    "lstm_out": list(out.shape),
    "sdpa_out": list(direct.shape),
}))
