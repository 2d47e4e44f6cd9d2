"""benchmarks/collectives/fit_sharing.py: twins in the same step, and the shipped sharing constants that need no
simulation (the compute factors, NCCL's launch size) are what the fit reads off the data."""

import gzip
import json

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
    assert fit.real_op("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") \
        == "reduce_scatter"
    assert fit.real_op("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)") == "all_reduce"
    assert fit.real_op("ncclDevKernel_SendRecv(x)") is None


def kernel(name: str, grid: list[int], nelems: int) -> dict:
    return {"cat": "kernel", "name": name, "ts": 0, "dur": 1, "args": {"grid": grid, "In msg nelems": nelems}}


def test_nccl_channels_are_the_most_common_grid_of_large_all_gathers_and_reduce_scatters(tmp_path):
    trace = tmp_path / "rank0.trace.json.gz"
    events = [kernel("ncclDevKernel_AllGather_RING_LL(x)", [24, 1, 1], 1 << 22),
              kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", [24, 1, 1], 1 << 24),
              kernel("ncclDevKernel_AllGather_RING_LL(x)", [2, 1, 1], 1 << 10),  # small: fewer channels
              kernel("ncclDevKernel_SendRecv(x)", [17, 1, 1], 1 << 24),  # point-to-point
              *[kernel("ncclDevKernel_SendRecv(x)", [17, 1, 1], 1 << 24)] * 2, kernel("nvjet_gemm", [132, 1, 1], 0)]
    with gzip.open(trace, "wt") as out:
        json.dump({"traceEvents": events}, out)
    assert fit.nccl_channels([trace])[0] == 24


def test_p2p_channels_per_peer_are_the_power_of_two_within_the_most_common_sendrecv_grid(tmp_path):
    trace = tmp_path / "rank0.trace.json.gz"
    events = [*[kernel("ncclDevKernel_SendRecv(x)", [17, 1, 1], 0)] * 3,  # a permutation: the peer's 16, 1 for self
              kernel("ncclDevKernel_SendRecv(x)", [2, 1, 1], 0),
              kernel("ncclDevKernel_AllGather_RING_LL(x)", [24, 1, 1], 1 << 22)]
    with gzip.open(trace, "wt") as out:
        json.dump({"traceEvents": events}, out)
    assert fit.p2p_channels_per_peer([trace])[0] == 16


@pytest.mark.slow
def test_the_shipped_nccl_channels_are_what_torchtitans_kernel_traces_show():
    """Slow for its data (four 10 MB traces), not for a simulation."""
    assert fit.nccl_channels()[0] == SHIPPED.nccl_channels == 24
    assert fit.p2p_channels_per_peer()[0] == SHIPPED.p2p_channels_per_peer == 16


@pytest.mark.parametrize("op", ["", "all_reduce"])
def test_the_shipped_compute_slowdowns_are_what_the_step_profiles_give(op):
    group = fit.BY_OP[op] if op else fit.DEFAULT
    shipped = SHIPPED.compute_factor(op) if op else SHIPPED.compute_slowdown
    assert round(fit.compute_slowdown(group)[0], 2) == shipped
