"""The shipped table of cuBLAS kernel choices and the first-launch constant are what benchmarks/kernels/gemm_kernels.py
builds and fits from data/h200/kernels/gemm_kernels/ and data/h200/host/first_launch/."""

import gzip
import json

from benchmarks.fit_all import shipped_table
from benchmarks.kernels import gemm_kernels as build
from phantora.models.gemm_kernels import GemmKernelTable
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value


def test_the_shipped_table_is_what_the_sweep_builds_and_the_constant_what_the_replays_fit():
    """Rebuild the GEMM table from the raw sweep (all but the `measured` line, which names the data's path) and refit
    the first-launch cost on the replays."""
    sweep = json.loads(gzip.decompress(build.sweep_path("h200").read_bytes()))
    built = build.build_table(sweep, "h200")
    shipped = json.loads(shipped_table("h200", build.TABLE).read_text())
    assert {k: v for k, v in built.items() if k != "measured"} == {k: v for k, v in shipped.items() if k != "measured"}
    table = load_profile("h200").gemm_kernels.value
    gemms = build.problems_by_size(sweep)
    rows = [r for path in build.replays("h200") for r in build.replay_rows(table, gemms, json.loads(path.read_text()))]
    per_kernel, _ = build.fit(rows)
    assert abs(per_kernel * load_profile("h200").host_contention.value.mean_factor() * 1e3 - H200_HOST.gemm_kernel_load_ns) < 50_000
