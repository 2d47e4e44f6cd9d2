"""Inductor's generated kernels as the compute model costs them, and CUDA graph capture and replay
(runtime/inductor.py Note [Simulated Inductor], runtime/cuda_graphs.py Note [Simulated CUDA graphs])."""

import pytest

from phantora.models.compute import Calibration, ComputeModel, KernelDatabase
from phantora.models.ops import OpCall, TensorMeta
from phantora.runtime.cuda_graphs import GraphCapture, replay
from phantora.specs import get_gpu_spec, load_profile

H200 = get_gpu_spec("h200")


def _model() -> ComputeModel:
    return ComputeModel(H200, KernelDatabase(H200.key), load_profile("h200").calibration.value)


def _flat(n: int, dtype: str = "bfloat16") -> TensorMeta:
    return TensorMeta((n,), dtype, (1,))


def test_a_fused_kernel_is_costed_by_the_bytes_it_moves_as_its_class():
    model = _model()
    small = model.estimate(OpCall("inductor.pointwise", (_flat(1 << 20),), (), (_flat(1 << 20),)))
    large = model.estimate(OpCall("inductor.pointwise", (_flat(1 << 24), _flat(1 << 24)), (), (_flat(1 << 24),)))
    reduction = model.estimate(OpCall("inductor.reduction", (_flat(1 << 24),), (), (_flat(1 << 10, "float32"),)))
    assert (small.kernel_class, small.source) == ("elementwise", "analytic")
    assert (reduction.kernel_class, reduction.source) == ("reduction", "analytic")
    assert large.bytes_moved == 3 * (1 << 25) and large.duration_ns > 5 * small.duration_ns
    # the same bytes as an eager add, which the fusion saves a round trip of
    eager_add = model.estimate(OpCall("aten.add.Tensor", (_flat(1 << 24), _flat(1 << 24)), (), (_flat(1 << 24),)))
    assert large.duration_ns == pytest.approx(eager_add.duration_ns, rel=0.05)


class _Host:
    class c:
        launch_ns = 4000


class _Session:
    host = _Host()

    def __init__(self):
        self.host_ns = 0
        self.launched = []

    def host_work(self, ns, term="other"):
        self.host_ns += ns

    def launch_costed(self, costed, stream, *, charge_host=True):
        self.launched.append((costed, stream, charge_host))


def test_a_capture_takes_the_capturing_streams_kernels_and_refuses_others():
    capture = GraphCapture((0, 7))
    assert capture.capture("k1", (0, 7)) and capture.capture("k2", (0, 7))
    assert capture.kernels == ["k1", "k2"]
    with pytest.raises(NotImplementedError, match="multi-stream capture"):
        capture.capture("k3", (0, 8))


def test_a_replay_costs_one_launch_and_puts_every_kernel_on_the_stream():
    session = _Session()
    replay(session, ("k1", "k2", "k3"), (0, 0))
    assert session.host_ns == 4000
    assert session.launched == [(k, (0, 0), False) for k in ("k1", "k2", "k3")]
