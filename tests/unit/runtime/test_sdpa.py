"""SDPA backend choice mirrors PyTorch's CUDA selection rules."""

import torch

from phantora.runtime.sdpa import choose_backend


def qkv(dtype, heads=8, kv_heads=8, head_dim=64):
    q = torch.empty(2, heads, 128, head_dim, dtype=dtype, device="meta")
    k = torch.empty(2, kv_heads, 128, head_dim, dtype=dtype, device="meta")
    return q, k, k


def test_cudnn_first_on_hopper_and_blackwell():
    assert choose_backend(*qkv(torch.bfloat16), None, 0.0, False, (9, 0)) == "cudnn"
    assert choose_backend(*qkv(torch.float16), None, 0.0, False, (10, 0)) == "cudnn"
    mask = torch.empty(128, 128, dtype=torch.bool, device="meta")
    assert choose_backend(*qkv(torch.bfloat16), mask, 0.0, False, (9, 0)) == "cudnn"


def test_flash_on_ampere_without_mask():
    assert choose_backend(*qkv(torch.bfloat16), None, 0.0, False, (8, 0)) == "flash"


def test_efficient_for_fp32_or_mask():
    assert choose_backend(*qkv(torch.float32), None, 0.0, False, (9, 0)) == "efficient"
    mask = torch.empty(128, 128, dtype=torch.bool, device="meta")
    assert choose_backend(*qkv(torch.bfloat16), mask, 0.0, False, (8, 0)) == "efficient"


def test_flash_needs_ampere_and_small_head_dim():
    assert choose_backend(*qkv(torch.float16), None, 0.0, False, (7, 5)) == "efficient"
    assert choose_backend(*qkv(torch.bfloat16, head_dim=512), None, 0.0, False, (8, 0)) == "efficient"


def test_gqa_only_with_enable_gqa():
    assert choose_backend(*qkv(torch.bfloat16, kv_heads=2), None, 0.0, True, (8, 0)) == "flash"
    assert choose_backend(*qkv(torch.bfloat16, kv_heads=2), None, 0.0, False, (8, 0)) == "math"


def test_sdpa_kernel_context_is_respected():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        assert choose_backend(*qkv(torch.bfloat16), None, 0.0, False, (9, 0)) == "flash"
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION], set_priority=True):
        assert choose_backend(*qkv(torch.bfloat16), None, 0.0, False, (9, 0)) == "efficient"
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            choose_backend(*qkv(torch.float32), None, 0.0, False, (9, 0))
        except RuntimeError as error:
            assert "No available kernel" in str(error)
        else:
            raise AssertionError("flash attention accepted float32 inputs")


def test_cudnn_takes_a_value_head_dim_other_than_the_query_one():
    """DeepSeek's multi-head latent attention: queries and keys of 192, values of 128 per head. TorchTitan allows
    cuDNN, flash and math only; cuDNN takes it on Hopper (flash needs equal head dims), so nothing materialises
    the attention matrix."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, _ = qkv(torch.bfloat16, head_dim=192)
    v = torch.empty(2, 8, 128, 128, dtype=torch.bfloat16, device="meta")
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH], set_priority=True):
        assert choose_backend(q, k, v, None, 0.0, False, (9, 0)) == "cudnn"
        assert choose_backend(q, k, v, None, 0.0, False, (10, 0)) == "cudnn"  # Blackwell's DeepSeek case
        assert choose_backend(q, k, v, None, 0.0, False, (8, 0)) == "math"    # cuDNN: 128 at most on Ampere
    big_q, big_k, _ = qkv(torch.bfloat16, head_dim=256)
    assert choose_backend(big_q, big_k, big_k, None, 0.0, False, (9, 0)) == "cudnn"
    assert choose_backend(big_q, big_k, big_k, None, 0.0, False, (10, 0)) == "flash"  # cuDNN: 128 off Hopper
