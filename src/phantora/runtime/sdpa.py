"""Scaled-dot-product attention takes the fused kernel a real GPU would take.

On a CPU build `F.scaled_dot_product_attention` picks the math path (a dozen separate kernels
and an O(L^2) attention matrix in memory), because the CUDA backend chooser is missing.
This routes CUDA inputs to the backend PyTorch's CUDA chooser (`sdp_utils.cpp`,
`select_sdp_backend`, torch 2.11-2.14 CUDA builds with cuDNN >= 9.9) would pick on the simulated
GPU: the first backend, in priority order, that is enabled (`torch.backends.cuda.*_sdp_enabled`,
the `sdpa_kernel` context) and whose constraints hold. On compute capability 9.0 and 10.0 (H100/H200,
B200) `check_prefer_cudnn_attention` puts cuDNN attention first; then flash attention (fp16/bf16, head
dim <= 256 and a multiple of 8, no explicit mask, compute capability >= 8.0), then memory-efficient
attention, then math. Under autocast the inputs are first cast as autocast casts
`scaled_dot_product_attention` (its lower-precision list): Hugging Face Llama's float32 queries and keys
after RoPE run bf16 attention, as on a GPU, not float32 memory-efficient attention. Measured on an H200 with torch 2.11: the llama benchmark's SDPA ran cuDNN
kernels (data/h200/kernels/in_step). With `enable_gqa` cuDNN and flash attention take the grouped key/value
heads as they are: TorchTitan's step runs no copies before its attention, and cuDNN's backward
reduces the gradients of the grouped heads itself (`fmha_reduce_head`, data/h200/e2e/step_profiles).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch.amp.autocast_mode import _cast

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phantora.runtime.session import Session

aten = torch.ops.aten


_BACKEND_NAMES = {1: "flash", 2: "efficient", 0: "math", 3: "cudnn"}
"""torch._C._SDPBackend values -> our names (4, 'overrideable', is for out-of-tree devices: never a CUDA choice)."""
_DEFAULT_PRIORITY = [1, 2, 0, 3, 4]
"""PyTorch's default SDPA priority order (flash, efficient, math, cudnn, overrideable)."""
_ENABLED = {"cudnn": torch.backends.cuda.cudnn_sdp_enabled, "flash": torch.backends.cuda.flash_sdp_enabled,
            "efficient": torch.backends.cuda.mem_efficient_sdp_enabled, "math": torch.backends.cuda.math_sdp_enabled}


def priority_order(capability: tuple[int, int]) -> list[str]:
    """The order in which PyTorch's CUDA selection tries the backends: the global order (`sdpa_kernel(...,
    set_priority=True)` sets it), with cuDNN first on compute capability 9.0 and 10.0 when it is the default
    (`check_prefer_cudnn_attention`)."""
    order = torch._C._get_sdp_priority_order()
    if order == _DEFAULT_PRIORITY and capability in ((9, 0), (10, 0)):
        order = [3, 1, 2, 0]
    return [_BACKEND_NAMES[b] for b in order if b in _BACKEND_NAMES]


def _cudnn_head_dim_limit(head_dim: int, value_dim: int, capability: tuple[int, int]) -> int:
    """cuDNN attention's largest head dim (`check_cudnn_tensor_shapes`, cuDNN >= 9.11): 256 on Hopper (9.0), 192 on
    Blackwell (10.x) for DeepSeek's 192/128 query/value heads only, else 128. Query and value head dims may differ."""
    if capability == (9, 0):
        return 256
    if capability[0] == 10 and (head_dim, value_dim) == (192, 128):
        return 192
    return 128


def _fits(backend: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask,
          enable_gqa: bool, capability: tuple[int, int]) -> bool:
    """Whether `backend`'s constraints hold for these inputs (sdp_utils.cpp `can_use_*`)."""
    head_dim = query.shape[-1]
    same_heads = query.shape[-3] == key.shape[-3] == value.shape[-3] if query.dim() == 4 else True
    half = query.dtype in (torch.float16, torch.bfloat16)
    if backend == "cudnn":
        value_dim = value.shape[-1]
        return ((8, 0) <= capability <= (12, 1) and half and query.dim() == 4 and key.shape[-2] != 1
                and max(head_dim, value_dim) <= _cudnn_head_dim_limit(head_dim, value_dim, capability)
                and head_dim % 8 == 0 and value_dim % 8 == 0 and (same_heads or enable_gqa))
    if backend == "flash":
        return (half and attn_mask is None and head_dim <= 256 and head_dim % 8 == 0 and capability >= (8, 0)
                and (same_heads or enable_gqa) and query.dim() == 4 and value.shape[-1] == head_dim)
    if backend == "efficient":
        return (query.dtype in (torch.float16, torch.bfloat16, torch.float32) and query.dim() == 4 and same_heads
                and head_dim % 8 == 0 and value.shape[-1] % 8 == 0 and capability >= (5, 0))
    return True


def choose_backend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask, dropout_p: float,
                   enable_gqa: bool, capability: tuple[int, int]) -> str:
    """'cudnn', 'flash', 'efficient' or 'math', as PyTorch's CUDA backend selection would choose: the first
    backend in priority order that is enabled (`torch.backends.cuda.*_sdp_enabled`, `sdpa_kernel`) and fits."""
    for backend in priority_order(capability):
        if _ENABLED[backend]() and _fits(backend, query, key, value, attn_mask, enable_gqa, capability):
            return backend
    raise RuntimeError("No available kernel. Aborting execution.")  # PyTorch's words when none applies


def install_sdpa_routing(session: Session) -> None:
    original = F.scaled_dot_product_attention
    capability = session.gpu.compute_capability

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        if torch.is_autocast_enabled("cuda"):  # SDPA is on autocast's lower-precision list: cast as it would
            query, key, value, attn_mask = _cast(
                (query, key, value, attn_mask), "cuda", torch.get_autocast_dtype("cuda"))
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
        # the math path itself: `original` would ask CUDA's backend chooser first, which on a CUDA build of PyTorch
        # queries the (absent) device
        return aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]

    F.scaled_dot_product_attention = scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = scaled_dot_product_attention
