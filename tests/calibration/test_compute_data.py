"""The compute model against the H200 measurements in data/h200/: the shipped database covers the measured llama
step and every op of the accuracy benchmark, and the microbenchmark-to-step conversion of
benchmarks/kernels/dataset.py."""

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.kernels import dataset
from phantora.models.compute import ComputeModel, KernelDatabase
from phantora.models.opcall import decode_op
from phantora.specs import get_gpu_spec, load_profile

ROOT = Path(__file__).resolve().parents[2]
H200 = get_gpu_spec("h200")


def _llama_step_ops():
    path = ROOT / "data" / "h200" / "kernels" / "in_step" / "llama3b" / "llama_ops.jsonl.gz"
    with gzip.open(path, "rt") as f:
        f.readline()
        for line in f:
            r = json.loads(line)
            if r["ctx"] == "llama|step8" and r.get("k"):
                op = decode_op(r)
                if any(x.device == "cuda" for x in op.tensor_inputs() + list(op.outputs)):
                    yield op, sum(k[2] for k in r["k"]), len(r["k"])


def test_packaged_database_covers_the_llama_benchmark():
    m = ComputeModel(H200, load_profile("h200").kernels.value, load_profile("h200").calibration.value)
    measured = estimated = 0
    for op, kernel_ns, n_kernels in _llama_step_ops():
        est = m.estimate(op)
        assert est.source == "measured", op.name
        measured += kernel_ns
        estimated += est.duration_ns - m.cal.kernel_gap_ns * n_kernels
    assert measured == pytest.approx(303.8e6, rel=0.01)
    assert estimated == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_the_shipped_database_has_every_op_of_the_accuracy_benchmark(gpu):
    """Every signature the 23 configurations run (data/h200/e2e/coverage/ops) is measured on each GPU that has a
    database of its own (data/<gpu>/kernels/micro/coverage_all)."""
    from phantora.profiler.oplog import read_ops
    db = load_profile(gpu).kernels.value
    sigs = {sig for path in (ROOT / "data/h200/e2e/coverage/ops").glob("*.jsonl") for sig in read_ops(path).records}
    assert len(sigs) > 4000
    assert sorted(sigs - set(db.entries))[:3] == []


def test_the_h100_database_holds_its_own_measurements_not_the_h200s():
    """The H100's entries come from data/h100/kernels: its bandwidth-bound adds take about the HBM ratio (4.8 / 3.35
    TB/s = 1.43) longer than the H200's entries of the same signature."""
    h100, h200 = load_profile("h100").kernels.value, load_profile("h200").kernels.value
    adds = [sig for sig in h100.entries if sig.startswith('["aten.add') and sig in h200.entries
            and h200.entries[sig].kernel_ns > 50_000]
    assert len(adds) >= 9
    ratios = sorted(h100.entries[sig].kernel_ns / h200.entries[sig].kernel_ns for sig in adds)
    assert 1.3 < ratios[len(ratios) // 2] < 1.55


def test_microbenchmark_to_step_factors_are_medians_per_group_and_size_class():
    """Note [Microbenchmark to step]: step / sqrt(cold * warm), median per (group, size class) with five
    pairs or more, and per size class over all groups."""
    step, cold, warm = {}, {}, {}
    for i, ratio in enumerate((0.8, 0.9, 1.0, 1.1, 1.2)):  # five GEMMs of 2 ms measured 1 ms cold, 4 warm
        step[f"g{i}"] = ("aten.mm.default", 2e6 * ratio)
        cold[f"g{i}"], warm[f"g{i}"] = 1e6, 4e6
    step["e"], cold["e"], warm["e"] = ("aten.add.Tensor", 5e3), 8e3, 2e3  # one 4 µs add: too few for its group
    step["x"] = ("aten.mul.Tensor", 1e3)  # measured in steps only: no pair
    factors = dataset.in_step_factors(step, cold, warm)
    assert factors == {("gemm", 3): pytest.approx(1.0), ("all", 3): pytest.approx(1.0)}
    assert dataset.size_class(19_999) == 0 and dataset.size_class(20_000) == 1 and dataset.size_class(1e6) == 3


def _sweep_norm_backwards():
    """(op, median summed kernel ns) of each LayerNorm and RMSNorm backward the H200 sweeps measured."""
    import statistics
    from collections import defaultdict

    from phantora.models.opcall import signature
    runs = defaultdict(list)
    with gzip.open(ROOT / "data" / "h200" / "kernels" / "micro" / "sweeps" / "micro_ops.jsonl.gz", "rt") as f:
        f.readline()
        for line in f:
            if "norm_backward" in line[:200]:
                r = json.loads(line)
                if r.get("k"):
                    op = decode_op(r)
                    runs[signature(op)].append((op, sum(k[2] for k in r["k"])))
    return [(v[0][0], statistics.median(ns for _, ns in v)) for v in runs.values()]


def test_the_norm_backwards_of_the_sweeps_fit_the_shipped_model():
    """Note [Norm backward's weight gradient]: the analytic model, with the shipped calibration, against every
    LayerNorm and RMSNorm backward of the H200 sweeps (1024-8192 columns, 4096-32768 rows), within 15 % each; the
    weight gradient's tiles bound the narrowest of them."""
    from dataclasses import replace

    from phantora.models.compute import norm_weight_grad
    cal = load_profile("h200").calibration.value
    m = ComputeModel(H200, KernelDatabase("h200"), replace(cal, kernel_gap_ns=0.0))
    measured = _sweep_norm_backwards()
    assert len(measured) == 20
    for op, kernel_ns in measured:
        assert m.analytic(op).duration_ns == pytest.approx(kernel_ns, rel=0.15), op.name
    narrow = min((op for op, _ in measured), key=lambda op: op.tensor_inputs()[0].shape[-1])
    g = norm_weight_grad(narrow, H200.sm_count)
    assert g.serial_tiles * cal.memory["norm_weight_grad"]["tile_ns"] > g.reread_bytes / 4.8e12 * 1e9
