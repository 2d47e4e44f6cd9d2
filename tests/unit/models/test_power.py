"""The power model: kernel energy, the running average of demanded power, and the stretch it sets."""

from __future__ import annotations

import pytest

from phantora.models.power import CLOCKED_CLASSES, GpuPower, PowerCap
from phantora.specs import load_profile

CAP = PowerCap(cap_w=700.0, idle_w=200.0, pj_per_tensor_flop=1.0, pj_per_byte=100.0, window_s=1.0, max_stretch=2.0)
MS = 1_000_000


def run_back_to_back(gpu: GpuPower, kernel_class: str, energy_j: float, ms: float, seconds: float, t_ns: int = 0) -> tuple[int, float]:
    """Kernels of `ms` back to back for `seconds`, each stretched as the model says; (end time, last stretch)."""
    clocked = kernel_class in CLOCKED_CLASSES
    flops, nbytes = (energy_j / CAP.pj_per_tensor_flop * 1e12, 0.0) if clocked else (0.0, energy_j / CAP.pj_per_byte * 1e12)
    stretch = 1.0
    while t_ns < seconds * 1e9:
        duration = gpu.place(t_ns, kernel_class, flops, nbytes, round(ms * MS))
        stretch = duration / (ms * MS)
        t_ns += duration
    return t_ns, stretch


def test_only_tensor_kernels_count_their_flops():
    assert CAP.energy_j("gemm", 1e12, 0.0) == pytest.approx(1.0)
    assert CAP.energy_j("elementwise", 1e12, 1e9) == pytest.approx(0.1)
    assert CAP.energy_j("attention", 1e12, 1e9) == pytest.approx(1.1)


def test_work_under_the_cap_is_not_stretched():
    gpu = GpuPower(CAP)
    _, stretch = run_back_to_back(gpu, "gemm", 0.4, 1.0, 5.0)  # 400 W demanded, 500 W left above idle
    assert stretch == 1.0 and gpu.slowed_ns == 0 and gpu.clocked_ns == 5000 * MS
    assert gpu.average_w() == pytest.approx(600.0, rel=0.02)


def test_sustained_gemms_over_the_cap_are_stretched_to_fit_it():
    gpu = GpuPower(CAP)
    _, stretch = run_back_to_back(gpu, "gemm", 0.6, 1.0, 8.0)  # 600 W demanded, 500 W left
    assert stretch == pytest.approx(1.2, rel=0.01)
    assert 0.1 < gpu.slowed_ns / gpu.clocked_ns < 0.2  # unthrottled for the first second or so


def test_memory_bound_power_leaves_less_for_gemms_and_the_stretch_has_a_floor():
    gpu = GpuPower(CAP)
    t, _ = run_back_to_back(gpu, "elementwise", 0.45, 1.0, 8.0)  # 450 W: 50 W left for clocked work
    assert gpu.stretch(t) == 1.0  # nothing clocked demanded yet
    gpu.add(t, "gemm", 150.0)  # 150 W over the window against 50 W left: more than the floor allows
    assert gpu.stretch(t) == CAP.max_stretch


def test_the_average_is_over_a_sliding_window():
    """Half a window after the GEMMs stop, half their demand is still in the average; a window after, none."""
    gpu = GpuPower(CAP)
    t, stretch = run_back_to_back(gpu, "gemm", 0.6, 1.0, 8.0)
    assert stretch > 1.1
    steady = gpu.average_w() - CAP.idle_w
    gpu.stretch(t + 5 * 10**8)
    assert gpu.average_w() - CAP.idle_w == pytest.approx(steady / 2, rel=0.02)
    assert gpu.stretch(t + 10**9) == 1.0
    assert gpu.average_w() == CAP.idle_w


def test_the_first_window_counts_the_idle_time_before_the_run():
    """A GPU idle before the run: 600 W demanded against 500 W left is over the cap once 5/6 of a window
    has run, and throttled to it after one window."""
    gpu = GpuPower(CAP)
    t, _ = run_back_to_back(gpu, "gemm", 0.6, 1.0, 0.8)
    assert gpu.slowed_ns == 0
    _, stretch = run_back_to_back(gpu, "gemm", 0.6, 1.0, 1.5, t_ns=t)
    assert stretch == pytest.approx(1.2, rel=0.01)


def test_gpus_without_measured_energies_have_no_power_model():
    assert load_profile("h200").power.value == PowerCap(cap_w=700.0, idle_w=184.0, pj_per_tensor_flop=0.827,
                                                       pj_per_byte=120.0)
    assert load_profile("a100").power.value is None and load_profile("b200").power.value is None


def test_an_idle_power_at_or_above_the_cap_is_refused():
    with pytest.raises(ValueError):
        PowerCap(cap_w=300.0, idle_w=300.0, pj_per_tensor_flop=1.0, pj_per_byte=1.0)
