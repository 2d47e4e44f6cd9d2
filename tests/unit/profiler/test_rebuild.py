"""Rebuilding a recorded op as a real call (profiler/rebuild.py): layouts, index ranges, domains, errors."""

import pytest
import torch
from profiled_ops import MM, TO_BF16, t

from phantora.models.ops import OpCall
from phantora.profiler.rebuild import RebuildError, measurable, rebuild


def test_rebuilt_tensors_have_recorded_layout_and_kwargs_are_converted():
    call = rebuild(TO_BF16, "cpu")
    x = call.args[0]
    assert x.shape == (8, 16) and x.stride() == (32, 1) and x.storage_offset() == 3 and x.dtype == torch.float32
    assert call.kwargs == {"device": torch.device("cpu"), "dtype": torch.bfloat16, "layout": torch.strided}
    out = call.run()
    assert out.dtype == torch.bfloat16 and out.shape == (8, 16)


def test_rebuilt_indices_are_in_range():
    emb = OpCall("aten.embedding.default", (t((50, 8)), t((4, 300), "int64")), (), (t((4, 300, 8)),))
    idx = rebuild(emb, "cpu").args[1]
    assert int(idx.min()) >= 0 and int(idx.max()) < 50 and len(idx.unique()) > 10
    nll = OpCall("aten.nll_loss_forward.default", (t((64, 7)), t((64,), "int64", offset=1), None, 1, -100), (),
                 (t(()), t(())))
    call = rebuild(nll, "cpu")
    assert int(call.args[1].max()) < 7 and call.args[1].storage_offset() == 1
    call.run()
    back = OpCall("aten.embedding_dense_backward.default", (t((4, 300, 8)), t((4, 300), "int64"), 50, -1, False),
                  (), (t((50, 8)),))
    assert int(rebuild(back, "cpu").args[1].max()) < 50
    index = OpCall("aten.index.Tensor", (t((5, 40)), (None, t((100,), "int64"))), (), (t((5, 100)),))
    call = rebuild(index, "cpu")
    assert call.args[1][0] is None and int(call.args[1][1].max()) < 40
    call.run()
    gather = OpCall("aten.gather.default", (t((6, 9)), 1, t((6, 30), "int64")), (), (t((6, 30)),))
    assert int(rebuild(gather, "cpu").args[2].max()) < 9


def test_domain_restricted_ops_get_positive_inputs_and_runs_are_reproducible():
    sqrt = OpCall("aten.sqrt.default", (t((1000,)),), (), (t((1000,)),))
    a, b = rebuild(sqrt, "cpu").args[0], rebuild(sqrt, "cpu").args[0]
    assert float(a.min()) > 0 and torch.equal(a, b)
    assert not torch.isnan(rebuild(sqrt, "cpu").run()).any()
    assert float(rebuild(MM, "cpu").args[0].min()) < 0  # ordinary ops: standard normal


def test_unknown_ops_and_dtypes_are_rebuild_errors():
    with pytest.raises(RebuildError, match="no operator"):
        rebuild(OpCall("aten.no_such_op.default", (t((2,)),), (), ()), "cpu")
    with pytest.raises(RebuildError, match="unknown dtype"):
        rebuild(OpCall("aten.neg.default", (t((2,), "float99"),), (), ()), "cpu")


def test_views_and_host_only_ops_are_not_measured():
    assert measurable(MM)
    assert not measurable(OpCall("aten.view.default", (t((4,)), (2, 2)), (), (t((2, 2)),)))
    assert not measurable(OpCall("aten.mm.default", (t((2, 2), device="cpu"),) * 2, (), (t((2, 2), device="cpu"),)))
    assert measurable(OpCall("aten.randn.default", ((4, 4),), (("device", "cuda"),), (t((4, 4)),)))
