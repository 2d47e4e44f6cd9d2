"""A custom CUDA op with no fake implementation: must fail with a clear error naming it."""

import torch

lib = torch.library.Library("phantora_test", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CPU")
x = torch.ones(8, device="cuda")
torch.ops.phantora_test.scale(x)
