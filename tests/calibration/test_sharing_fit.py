"""benchmarks/collectives/fit_sharing.py: twins in the same step, and the shipped sharing constants that need no
simulation (the compute factors, NCCL's launch size) are what the fit reads off the data."""

import pytest

from benchmarks.collectives import fit_sharing as fit
from phantora.specs import load_profile

SHIPPED = load_profile("h200").sharing.value


def layers(gemm_us: list[float]) -> list[tuple[str, str, int, float, float]]:
    """Layers of a norm, a GEMM and an add back to back, the GEMM of layer i taking `gemm_us[i]` µs, the others 5."""
    kernels, t = [], 0.0
    for us in gemm_us:
        kernels += [("norm", "rms_norm", 7, t, t + 5), ("gemm", "nvjet_a", 7, t + 5, t + 5 + us),
                    ("elementwise", "add", 7, t + 5 + us, t + 10 + us)]
        t += 10 + us
    return kernels


def test_a_kernel_under_nccl_is_compared_with_its_twins_at_the_same_place_alone():
    kernels = layers([100, 100, 150, 100, 100])  # layer 2's GEMM ran under an all-gather
    under = kernels[7]
    kernels.append(("nccl", "ncclDevKernel_AllGather_RING_LL(x)", 20, under[3], under[4]))
    places = fit.kernel_times(kernels, ("all_gather",))
    middle = ("nvjet_a", "add", "rms_norm", "nvjet_a", "add", "rms_norm", "nvjet_a")
    assert places[middle] == ([100, 100], [150])  # the first and last layers' GEMMs sit elsewhere: not twins
    assert fit.slowdown_beside([kernels], ("all_gather",)) == (1.5, 1)
    assert fit.slowdown_beside([kernels], ("reduce_scatter",)) == (1.0, 0)


def test_nccl_kernel_names_map_to_network_operations():
    assert fit.real_op("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "reduce_scatter"
    assert fit.real_op("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)") == "all_reduce"
    assert fit.real_op("ncclDevKernel_SendRecv(x)") is None


def test_nccl_channels_are_the_blocks_of_nccls_large_collective_kernels():
    channels, _ = fit.nccl_channels()
    assert channels == SHIPPED.nccl_channels == 24


@pytest.mark.parametrize("op", ["", "all_reduce"])
def test_the_shipped_compute_slowdowns_are_what_the_step_profiles_give(op):
    group = fit.BY_OP[op] if op else fit.DEFAULT
    shipped = SHIPPED.compute_factor(op) if op else SHIPPED.compute_slowdown
    assert round(fit.compute_slowdown(group)[0], 2) == shipped
