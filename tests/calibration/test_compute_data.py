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


SWEEPS = ("sweeps/micro_ops", "shape_sweeps/shapes_ops")
"""The microbenchmark sweeps under data/<gpu>/kernels/micro/: the general one and the layouts'."""


def _sweep_ops(gpu, wanted):
    """(op, median summed kernel ns) of each op of the GPU's sweeps, measured with the L2 evicted, whose name
    contains one of `wanted`."""
    import statistics
    from collections import defaultdict

    from phantora.models.opcall import signature
    runs = defaultdict(list)
    for sweep in SWEEPS:
        with gzip.open(ROOT / "data" / gpu / "kernels" / "micro" / f"{sweep}.jsonl.gz", "rt") as f:
            f.readline()
            for line in f:
                if any(w in line[:300] for w in wanted):
                    r = json.loads(line)
                    if r.get("k") and r["ctx"].endswith("cold") and any(w in r["name"] for w in wanted):
                        op = decode_op(r)
                        runs[signature(op)].append((op, sum(k[2] for k in r["k"])))
    return [(v[0][0], statistics.median(ns for _, ns in v)) for v in runs.values()]


def _analytic(gpu):
    from dataclasses import replace
    return ComputeModel(get_gpu_spec(gpu), KernelDatabase(gpu), replace(load_profile(gpu).calibration.value,
                                                                        kernel_gap_ns=0.0))


def _errors(model, measured):
    return [model.analytic(op).duration_ns / ns - 1 for op, ns in measured]


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_the_norms_of_the_sweeps_fit_the_shipped_model(gpu):
    """Notes [Norms pay per row] and [Norm backward's weight gradient]: the analytic model, with the GPU's shipped
    calibration, against every LayerNorm and RMSNorm of its sweeps (128-8192 columns, 4096-131072 rows): a median
    error within 8 % each way, every one within 30 %, and the narrow forwards (512 columns or fewer, where the rows'
    latency rules: 50-70 % short with bytes alone) within 25 %; the weight gradient's tiles bound the narrowest
    backward whose blocks walk all the rows."""
    from phantora.models.compute import norm_weight_grad
    m = _analytic(gpu)
    for direction in ("norm.default", "norm_backward.default"):
        measured = _sweep_ops(gpu, (f"rms_{direction}", f"layer_{direction}"))
        assert len(measured) == 82
        errors = sorted(abs(e) for e in _errors(m, measured))
        assert errors[len(errors) // 2] < 0.08 and errors[-1] < 0.30, direction
    forwards = _sweep_ops(gpu, ("rms_norm.default", "layer_norm.default"))
    narrow = [(op, ns) for op, ns in forwards if op.tensor_inputs()[0].shape[-1] <= 512]
    assert len(narrow) == 32 and max(abs(e) for e in _errors(m, narrow)) < 0.25
    grads = [norm_weight_grad(op, m.gpu.sm_count) for op, _ in _sweep_ops(gpu, ("norm_backward",))]
    walked = [g for g in grads if not g.split_rows]
    g = max(walked, key=lambda g: g.serial_tiles / g.reread_bytes)  # 128 columns over 65536 rows: 256 tiles, 16 MB
    tile_ns = m.cal.memory["norm_weight_grad"]["tile_ns"]
    assert g.serial_tiles * tile_ns > g.reread_bytes / m.gpu.memory_bandwidth_bytes_per_s * 1e9


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_the_strided_cats_of_the_sweeps_fit_the_shipped_model(gpu):
    """Note [Strided concatenation]: every strided or expanded `cat` of the layout sweeps (2-4 dims, 8-268 M
    elements, bfloat16 and float32) within 15 % (a strided copy of their bytes was 25-70 % off), and the contiguous
    ones still take the vectorized copy's bytes model."""
    from phantora.models.compute import strided_cat
    m = _analytic(gpu)
    cats = _sweep_ops(gpu, ("aten.cat",))
    strided = [(op, ns) for op, ns in cats if strided_cat(op) is not None]
    assert len(strided) == 32
    assert max(abs(e) for e in _errors(m, strided)) < 0.15
    contiguous = [op for op, _ in cats if strided_cat(op) is None]
    assert contiguous and {m._memory_kind(op, "copy") for op in contiguous} == {"copy"}


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_the_index_puts_of_the_sweeps_fit_the_shipped_model(gpu):
    """Note [index_put_'s two kernels]: the layout sweeps' index_put_ without accumulation within 10 % (a bytes model
    was 10-50 % short), with accumulation (a sort, then a warp step per index and 128 columns) within 20 %."""
    from phantora.models.compute import index_put
    m = _analytic(gpu)
    calls = _sweep_ops(gpu, ("index_put_",))
    plain = [(op, ns) for op, ns in calls if not index_put(op).accumulate]
    summed = [(op, ns) for op, ns in calls if index_put(op).accumulate]
    assert len(plain) == 18 and len(summed) == 18
    assert max(abs(e) for e in _errors(m, plain)) < 0.10
    assert max(abs(e) for e in _errors(m, summed)) < 0.20


def test_the_shipped_layout_terms_are_what_the_fit_gives():
    """`python -m benchmarks.kernels.fit --only cat_strided,index_put,norm` on the H200's measurements reproduces the
    shipped calibration's fields for those terms (the whole refit does the same: benchmarks.fit_all --check)."""
    from benchmarks.kernels import fit
    fit.use_gpu("h200")
    obs = dataset.load_observations()
    obs += dataset.in_step_observations(obs)[0]
    mem: dict = {}
    fit.fit_terms(mem, fit.memory_groups(obs), fit.TERMS)
    shipped = load_profile("h200").calibration.value.memory
    assert set(mem) == {"cat_strided", "index_put", "index_put_accumulate", "norm_rows", "norm_weight_grad",
                        "aten._fused_rms_norm", "aten._fused_rms_norm_backward", "aten.native_layer_norm",
                        "aten.native_layer_norm_backward"}
    for kind, fields in fit._round(mem).items():
        assert fields == shipped[kind], kind
