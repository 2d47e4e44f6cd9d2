"""Ops whose tensors hold no element launch no kernel, as PyTorch's CUDA ops return before launching one
(models/ops.py Note [Ops without elements]); the host still pays their dispatch."""

from __future__ import annotations

from phantora.config.run import RankConfig
from phantora.models.ops import OpCall, TensorMeta, contiguous_strides, touches_no_element
from phantora.protocol.records import KernelRecord
from phantora.runtime.session import Session
from recording_transport import Recording


def tensor(*shape: int) -> TensorMeta:
    return TensorMeta(shape, "float32", contiguous_strides(shape))


def add(a: TensorMeta, b: TensorMeta, out: TensorMeta) -> OpCall:
    return OpCall("aten.add.Tensor", (a, b), (), (out,))


EMPTY = add(tensor(0, 8), tensor(0, 8), tensor(0, 8))
FULL = add(tensor(4, 8), tensor(4, 8), tensor(4, 8))


def session() -> Session:
    return Session(RankConfig(gpu="h200", trace=False, use_kernel_database=False), Recording(), flush_interval_s=None)


def kernels(s: Session) -> list[KernelRecord]:
    s.link.flush()
    return [r for r in s.link.transport.records if isinstance(r, KernelRecord)]


def test_only_an_op_whose_tensors_all_lack_elements_touches_none():
    assert touches_no_element(EMPTY)
    assert touches_no_element(OpCall("aten.cat.default", ((tensor(0), tensor(0)),), (), (tensor(0),)))
    assert not touches_no_element(FULL)
    # it reads elements before it knows it returns none (nonzero counts on the GPU)
    assert not touches_no_element(OpCall("aten.nonzero.default", (tensor(16),), (), (tensor(0, 1),)))
    # a sum of nothing writes a zero
    assert not touches_no_element(OpCall("aten.sum.default", (tensor(0),), (), (tensor(),)))
    assert not touches_no_element(OpCall("aten._foreach_add_.Scalar", ((), 1.0), (), ()))


def test_an_op_without_elements_charges_the_host_and_launches_nothing():
    s = session()
    s.launch_kernel(EMPTY, (0, 0))
    dispatch_ns = s.now_ns()
    assert dispatch_ns > 0
    assert kernels(s) == []
    assert (s.stats.kernels, s.stats.host_only_ops, s.stats.ops_without_elements) == (0, 1, 1)
    s.launch_kernel(FULL, (0, 0))
    assert len(kernels(s)) == 1 and s.stats.kernels == 1
    assert s.now_ns() == 2 * dispatch_ns  # the same op's host cost either way


def test_an_op_without_elements_needs_no_cost_model_even_under_strict():
    """It runs no kernel, so --strict has nothing to refuse and the summary no unmodelled op to count."""
    s = Session(RankConfig(gpu="h200", trace=False, use_kernel_database=False, strict=True), Recording(),
                flush_interval_s=None)
    unknown = OpCall("aten.no_model_here.default", (tensor(0, 8),), (), (tensor(0, 8),))
    assert s.cost(unknown).estimate.source == "generic"
    s.launch_kernel(unknown, (0, 0))
    assert not s.stats.generic_ops and s.stats.ops_without_elements == 1
