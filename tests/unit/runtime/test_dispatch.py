"""Which ops are kernels, how an op becomes an OpCall, placeholder values, memory downsampling."""

import torch

from phantora.models.ops import TensorMeta
from phantora.runtime.rank_result import downsample_memory
from phantora.runtime.dispatch import _factory_size, launches_no_kernel, make_op_call
from phantora.runtime.handlers import ALL_TRUE_ATTR, placeholder_scalar

aten = torch.ops.aten


def test_views_and_allocations_launch_no_kernel():
    for op in (aten.view.default, aten.t.default, aten.transpose.int, aten.expand.default,
               aten.as_strided.default, aten.empty.memory_format, aten.detach.default, aten._unsafe_view.default):
        assert launches_no_kernel(op), op


def test_compute_and_inplace_ops_are_kernels():
    for op in (aten.mm.default, aten.add_.Tensor, aten.copy_.default, aten.fill_.Scalar,
               aten._foreach_add_.Scalar, aten.clone.default, aten._to_copy.default):
        assert not launches_no_kernel(op), op


def test_op_call_is_plain_and_hashable():
    a = torch.empty(4, 8, dtype=torch.bfloat16, device="meta")
    b = torch.empty(8, 2, device="meta").t()
    call = make_op_call(aten.mm.default, (a, b), {"out_dtype": torch.float32, "sizes": [1, 2]}, [a])
    assert call.name == "aten.mm.default"
    assert call.args[0] == TensorMeta((4, 8), "bfloat16", (8, 1), "meta")
    assert call.args[1] == TensorMeta((2, 8), "float32", (1, 2), "meta")
    assert dict(call.kwargs) == {"out_dtype": "float32", "sizes": (1, 2)}
    assert hash(call) == hash(make_op_call(aten.mm.default, (a, b), {"sizes": [1, 2], "out_dtype": torch.float32}, [a]))
    assert [t.shape for t in call.tensor_inputs()] == [(4, 8), (2, 8)]


def test_placeholder_values():
    assert placeholder_scalar(torch.empty((), dtype=torch.float32)) == 0.0
    assert placeholder_scalar(torch.empty((), dtype=torch.int64)) == 0
    flag = torch.empty((), dtype=torch.bool)
    assert placeholder_scalar(flag) is False
    setattr(flag, ALL_TRUE_ATTR, True)
    assert placeholder_scalar(flag) is True


def test_memory_downsampling_keeps_peaks():
    samples = [(t, 0, (1000 if t == 500 else t), 2 * t) for t in range(1000)] + [(5, 1, 10**9, 10**9)]
    down = downsample_memory(samples, buckets=10)
    assert len(down["time_s"]) == 10
    assert max(down["allocated_bytes"]) == 1000  # the spike at t=500 survives; device 1 is ignored
    assert down["reserved_bytes"][-1] == 2 * 999


def test_gemm_operands_of_two_dtypes_fail_as_on_a_gpu():
    """Note [Checks of the CUDA kernels]: the meta kernels of mm and addmm accept a float32 and a bfloat16
    operand; CUDA's raise."""
    from phantora.runtime.cuda_checks import check_like_cuda

    f32 = torch.empty(4, 4, device="meta")
    bf16 = torch.empty(4, 4, device="meta", dtype=torch.bfloat16)
    for func, args in ((aten.mm.default, (f32, bf16)), (aten.addmm.default, (f32, f32, bf16))):
        try:
            check_like_cuda(func, args)
        except RuntimeError as error:
            assert "expected mat1 and mat2 to have the same dtype" in str(error)
        else:
            raise AssertionError(f"{func} accepted two dtypes")
    check_like_cuda(aten.mm.default, (bf16, bf16))


def test_a_host_factory_s_size_is_read_from_its_arguments():
    """A small host factory runs for real at once, without a fake run to learn its size: `randint(low, high, size)`,
    which a data loader calls per sample, names its size third."""
    assert _factory_size(aten.randint.low_generator, (0, 50, [1025]), {"generator": None}) == [1025]
    assert _factory_size(aten.randint.low, (0, 50), {"size": (2, 3)}) == (2, 3)
    assert _factory_size(aten.zeros.default, ([4, 4],), {}) == [4, 4]
    assert _factory_size(aten.arange.default, (10,), {}) is None  # its size follows from its values


def test_a_host_tensor_op_reads_each_argument_once_and_writes_its_new_outputs():
    """models/host.py Note [Tensor ops on the host]."""
    from phantora.runtime.dispatch import host_tensor_bytes

    a, b = torch.ones(4, 8), torch.ones(4, 8, dtype=torch.float64)
    out = torch.stack([a, a])
    assert host_tensor_bytes([a, a, 0], out) == (128 + 256, [256])
    assert host_tensor_bytes([a, b], a) == (128 + 256, [])  # in place: the result is an argument
    assert host_tensor_bytes([], (out, b)) == (256 + 256, [256, 256])
    meta = torch.empty(1 << 20, device="meta")
    assert host_tensor_bytes([meta], meta.clone()) == (0, [])  # nothing in memory to move
