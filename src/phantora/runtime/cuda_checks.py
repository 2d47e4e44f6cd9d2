"""Checks that CUDA kernels make and PyTorch's meta kernels skip.

Note: [Checks of the CUDA kernels]
A fake tensor's op runs its meta kernel, which computes the result's shape and dtype. Most meta kernels
check what the CUDA kernel checks, but not all: `aten.mm` of a float32 and a bfloat16 matrix raises on a GPU
("expected mat1 and mat2 to have the same dtype", aten/src/ATen/native/cuda/Blas.cpp) while its meta kernel
returns a float32 result. A program that fails on the GPU would then run here and be costed as if it worked
(a Megatron-core bf16 model without its Float16Module: float32 position embeddings fed bf16 linear layers,
which the GPU refuses). These checks raise what the GPU raises, before the op runs. `bmm`, `baddbmm`,
`addmv` and `dot` need none: their meta kernels check their operands' dtypes.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

MATRIX_OPERANDS = {
    aten.mm.default: (0, 1),
    aten.addmm.default: (1, 2),
    aten._addmm_activation.default: (1, 2),
    aten.addbmm.default: (1, 2),
    aten.mv.default: (0, 1),
}
"""GEMM ops whose meta kernels accept operands of two dtypes: the positions of the two multiplied operands."""


def check_like_cuda(func, args: tuple) -> None:
    """Raise the CUDA kernel's error where its meta kernel would accept the arguments."""
    operands = MATRIX_OPERANDS.get(func)
    if operands is None:
        return
    first, second = (args[i] for i in operands)
    if first.dtype != second.dtype:
        raise RuntimeError(f"expected mat1 and mat2 to have the same dtype, but got: {first.dtype} != "
                           f"{second.dtype}")
