"""The chip-spread fit (benchmarks/power/fit_chip_spread.py): deviations from a machine's mean, pooled over machines."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmarks.power.fit_chip_spread import deviations, machines_from_microbenchmark, pooled_sigma, step_spread


def test_the_spread_is_pooled_within_machines_not_across_them():
    # two machines of two chips: each chip 1 % off its own machine's mean, whatever the machines' means
    machines = {"a": {"clocked": deviations([99.0, 101.0])}, "b": {"clocked": deviations([198.0, 202.0])}}
    assert pooled_sigma(machines, "clocked") == pytest.approx((4 * 0.01**2 / 2) ** 0.5)


def test_step_profiles_count_only_kernels_no_nccl_kernel_overlapped_on_any_gpu(tmp_path):
    names = ["sm90_xmma_gemm_bf16", "elementwise_kernel", "ncclDevKernel_AllGather_RING_LL"]
    ranks = {
        0: [[0, 7, 0.0, 100.0, "kernel"], [1, 7, 100.0, 10.0, "kernel"], [0, 7, 200.0, 100.0, "kernel"]],
        # rank 1's second GEMM ran beside an all-gather: neither GPU's second GEMM counts
        1: [[0, 7, 0.0, 110.0, "kernel"], [1, 7, 110.0, 10.0, "kernel"], [0, 7, 200.0, 300.0, "kernel"],
            [2, 20, 250.0, 50.0, "kernel"]],
    }
    for rank, kernels in ranks.items():
        with gzip.open(tmp_path / f"rank{rank}.json.gz", "wt") as f:
            json.dump({"wall_ms": 1.0, "names": names, "kernels": kernels}, f)
    assert step_spread(tmp_path) == {"clocked": [100.0, 110.0], "other": [10.0, 10.0]}


def test_the_shipped_microbenchmarks_give_one_deviation_per_gpu_around_the_mean():
    machines = machines_from_microbenchmark("h200")
    assert len(machines) >= 2
    for kinds in machines.values():
        assert len(kinds["clocked"]) == 4 and sum(kinds["clocked"]) == pytest.approx(0, abs=1e-12)
