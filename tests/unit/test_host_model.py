"""Host (CPU) cost model: per-op constants and the calibrated llama step total."""

import gzip
import json
from pathlib import Path

import pytest

from phantora.models.compute import opcall_from_record
from phantora.models.host import H200_HOST, HostConstants, HostModel
from phantora.models.ops import OpCall, TensorMeta

ROOT = Path(__file__).resolve().parents[2]


def t(*shape, dtype="float32"):
    stride, acc = [], 1
    for d in reversed(shape):
        stride.insert(0, acc)
        acc *= d
    return TensorMeta(tuple(shape), dtype, tuple(stride))


def op(name, *args, outputs=()):
    return OpCall(name, args, (), tuple(outputs))


def test_kernel_op_is_launch_plus_framework_plus_allocation():
    c = H200_HOST
    m = HostModel()
    assert m.op_ns(op("aten.add.Tensor", t(8), t(8), outputs=[t(8)])) == c.launch_ns + c.framework_ns + c.alloc_output_ns
    assert m.op_ns(op("aten.add_.Tensor", t(8), t(8), outputs=[t(8)])) == c.launch_ns + c.framework_ns


def test_views_are_cheaper_than_launches_and_gemms_dearer():
    m = HostModel()
    view = m.op_ns(op("aten.view.default", t(4, 4), (16,), outputs=[t(16)]))
    add = m.op_ns(op("aten.add.Tensor", t(8), t(8), outputs=[t(8)]))
    mm = m.op_ns(op("aten.mm.default", t(64, 64), t(64, 64), outputs=[t(64, 64)]))
    assert view == H200_HOST.view_ns < add < mm
    assert mm - add == H200_HOST.gemm_extra_ns
    assert m.alloc_ns("aten.empty.memory_format") == H200_HOST.alloc_ns


def test_foreach_cost_grows_linearly_with_the_tensor_list():
    m = HostModel()
    def fe(n, name="aten._foreach_mul_.Scalar"):
        return m.op_ns(op(name, tuple(t(64) for _ in range(n)), 0.9))
    assert fe(200) - fe(100) == 100 * H200_HOST.foreach_inplace_per_tensor_ns
    assert fe(100, "aten._foreach_sqrt.default") - fe(100) == 100 * (
        H200_HOST.foreach_alloc_per_tensor_ns - H200_HOST.foreach_inplace_per_tensor_ns)
    fused = m.op_ns(op("aten._fused_adamw_.default", *(tuple(t(64) for _ in range(10)) for _ in range(4))))
    assert fused == H200_HOST.foreach_base_ns + 10 * H200_HOST.fused_optimizer_per_tensor_ns


def test_constants_are_configurable_and_deterministic():
    m = HostModel(HostConstants(framework_ns=0))
    x = op("aten.add_.Tensor", t(8), t(8), outputs=[t(8)])
    assert m.op_ns(x) == H200_HOST.launch_ns == m.op_ns(x)


def test_llama_step_host_time_matches_host_bound_measurement():
    """The benchmark's op stream (one step, CUDA ops only) must cost what the same op sequence
    took on the H200 machine's CPU when host-bound: 86-89 ms (data/h200/call3/phases.json)."""
    phases = json.loads((ROOT / "data/h200/call3/phases.json").read_text())[0]["phase_s_median"]
    measured_ns = sum(phases.values()) * 1e9
    m = HostModel()
    total = 0
    with gzip.open(ROOT / "data/h200/call1b/llama_ops.jsonl.gz", "rt") as f:
        f.readline()
        for line in f:
            r = json.loads(line)
            if r["ctx"] != "llama|step7":
                continue
            o = opcall_from_record(r)
            if any(x.device == "cuda" for x in o.tensor_inputs() + list(o.outputs)):
                total += m.op_ns(o)
    assert total == pytest.approx(measured_ns, rel=0.05)
