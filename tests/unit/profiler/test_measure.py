"""Timing rebuilt ops (profiler/measure.py): the CPU timer, and the profiler timer's attribution of kernels to ops."""

from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch
from profiled_ops import ADAMW, MM, TO_BF16, t

from phantora.models.ops import OpCall
from phantora.profiler.measure import TAG, MeasureConfig, Measurer, ProfilerAttributionError, tag_kernel_times


def test_cpu_timer_measures_and_lists_failures():
    results = {}
    ops = [MM, OpCall("aten.no_such_op.default", (t((2,)),), (), ()), ADAMW]
    Measurer(MeasureConfig(device="cpu", warmup=1, repeat=3)).measure(ops, lambda i, m, r: results.update({i: (m, r)}))
    assert results[0][0].kernel_ns > 0 and len(results[0][0].samples_ns) == 3 and results[0][0].n_kernels == 1
    assert results[1][0] is None and "cannot rebuild" in results[1][1]
    assert results[2][0] is not None


def test_measure_config_rejects_mismatched_timer():
    with pytest.raises(ValueError, match="does not time"):
        MeasureConfig(device="cpu", timer="profiler")
    with pytest.raises(ValueError, match="repeat"):
        MeasureConfig(device="cpu", repeat=0)


Kernel = namedtuple("Kernel", ["name", "device", "duration"])


def _event(name, kernels=(), children=(), device="cpu", start=0.0):
    dt = torch.autograd.DeviceType.CPU if device == "cpu" else torch.autograd.DeviceType.CUDA
    return SimpleNamespace(name=name, device_type=dt, kernels=list(kernels), cpu_children=list(children),
                           time_range=SimpleNamespace(start=start))


def test_tag_kernel_times_sum_the_subtree_without_the_annotation_range():
    gemm = _event("aten::mm", [Kernel("sm90_xmma_gemm", 0, 12.5), Kernel("Memset (Device)", 0, 1.0)], start=3.0)
    cast = _event("aten::copy_", [Kernel("cast", 0, 2.0)], start=1.0)
    tag0 = _event(f"{TAG}0|0", [Kernel(f"{TAG}0|0", 0, 20.0)], [_event("aten::addmm", children=[gemm, cast])])
    tag1 = _event(f"{TAG}0|1", children=[_event("aten::mm", [Kernel("k", 0, 11.0)])])
    gpu_side = _event(f"{TAG}0|0", [Kernel("x", 0, 99.0)], device="cuda")  # gpu_user_annotation: ignored
    other = _event("aten::zero_", [Kernel("flush", 0, 50.0)])
    times = tag_kernel_times([tag0, tag1, gpu_side, other, _event(f"{TAG}bad")])
    assert times == {(0, 0): (15500, 3, ("cast", "sm90_xmma_gemm", "Memset (Device)")), (0, 1): (11000, 1, ("k",))}


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_profiler_timer_never_stores_kernel_less_measurements():
    measurer = Measurer(MeasureConfig(device="cpu", warmup=0, repeat=2))  # CPU ops: the profiler sees no GPU kernel
    got = []
    measurer._profile_chunk([MM], 0, lambda i, m, r: got.append((m, r)))
    assert got == [(None, "the profiler saw no GPU kernel for this op")]
    with pytest.raises(ProfilerAttributionError, match="--timer events"):
        measurer._profile_chunk([MM, TO_BF16], 0, lambda i, m, r: None)
