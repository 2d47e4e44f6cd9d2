"""Scaled-dot-product attention takes the fused kernel a real GPU would take.

On a CPU build `F.scaled_dot_product_attention` picks the math path (a dozen separate kernels
and an O(L^2) attention matrix in memory), because the CUDA backend chooser is missing.
This routes CUDA inputs to the backend PyTorch's CUDA chooser (`sdp_utils.cpp`,
`select_sdp_backend`, torch 2.11-2.13 CUDA builds with cuDNN >= 9.9) would pick on the simulated
GPU: on compute capability 9.0 and 10.0 (H100/H200, B200) `check_prefer_cudnn_attention` puts
cuDNN attention first; then flash attention when its constraints hold (fp16/bf16, head dim
<= 256 and a multiple of 8, no explicit mask, compute capability >= 8.0), then memory-efficient
attention, then math. Measured on an H200 with torch 2.11: the llama benchmark's SDPA ran cuDNN
kernels (data/h200/call1b). With `enable_gqa` cuDNN and flash attention take the grouped key/value
heads as they are: TorchTitan's step runs no copies before its attention, and cuDNN's backward
reduces the gradients of the grouped heads itself (`fmha_reduce_head`, data/h200/call22).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phantora.runtime.session import Session

aten = torch.ops.aten


def choose_backend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask, dropout_p: float,
                   enable_gqa: bool, capability: tuple[int, int]) -> str:
    """'cudnn', 'flash', 'efficient' or 'math', as PyTorch's CUDA backend selection would choose."""
    head_dim = query.shape[-1]
    same_heads = query.shape[-3] == key.shape[-3] == value.shape[-3] if query.dim() == 4 else True
    half = query.dtype in (torch.float16, torch.bfloat16)
    if (capability in ((9, 0), (10, 0)) and half and query.dim() == 4 and head_dim <= 256 and head_dim % 8 == 0
            and value.shape[-1] == head_dim and (same_heads or enable_gqa)):
        return "cudnn"
    if (query.dtype in (torch.float16, torch.bfloat16) and attn_mask is None and head_dim <= 256
            and head_dim % 8 == 0 and capability >= (8, 0) and (same_heads or enable_gqa)
            and query.dim() == 4 and value.shape[-1] == head_dim):
        return "flash"
    if query.dtype in (torch.float16, torch.bfloat16, torch.float32) and query.dim() == 4 and same_heads \
            and head_dim % 8 == 0 and value.shape[-1] % 8 == 0 and capability >= (5, 0):
        return "efficient"
    return "math"


def install_sdpa_routing(session: Session) -> None:
    original = F.scaled_dot_product_attention
    capability = session.gpu.compute_capability

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        # cuDNN and flash attention take grouped key/value heads as they are (no repeat)
        backend = choose_backend(query, key, value, attn_mask, dropout_p, enable_gqa, capability)
        if backend == "cudnn":
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                # as PyTorch does for cuDNN: a boolean mask becomes an additive bias
                attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(query.dtype)
            compute_lse = query.requires_grad or key.requires_grad or value.requires_grad
            return aten._scaled_dot_product_cudnn_attention(
                query, key, value, attn_mask, compute_lse, dropout_p, is_causal, False, scale=scale)[0]
        if backend == "flash":
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if backend == "efficient":
            compute_lse = query.requires_grad or key.requires_grad or value.requires_grad
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, compute_lse, dropout_p, is_causal, scale=scale)[0]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, enable_gqa=enable_gqa)

    F.scaled_dot_product_attention = scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = scaled_dot_product_attention
