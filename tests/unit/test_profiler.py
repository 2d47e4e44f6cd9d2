"""`phantora profile` pieces without a GPU: the ops log and its files, rebuilding inputs, the CPU timer,
the profiler-event attribution, the pipeline into a kernel database, and combining databases."""

import json
from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch

from phantora.models.compute import DbEntry, KernelDatabase, signature
from phantora.models.ops import KernelEstimate, OpCall, TensorMeta
from phantora.profiler.database import check_gpu_name, combined_database, gpu_key_for_device
from phantora.profiler.measure import TAG, MeasureConfig, Measurer, tag_kernel_times
from phantora.profiler.oplog import (
    OpLog, decode_op, encode_record, merge_ops, merge_rank_ops, ops_files_in, read_ops, write_ops,
)
from phantora.profiler.rebuild import RebuildError, measurable, rebuild
from phantora.profiler.run import ProfileConfig, ProfileError, profile_ops
from phantora.specs import load_profile


def t(shape, dtype="float32", stride=None, device="cuda", offset=0):
    if stride is None:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
    return TensorMeta(tuple(shape), dtype, tuple(stride), device, offset)


def est(ns=1000, source="analytic"):
    return KernelEstimate(ns, 0.0, 0.0, "elementwise", source)


MM = OpCall("aten.mm.default", (t((37, 53)), t((53, 29))), (), (t((37, 29)),))
ADAMW = OpCall("aten._fused_adamw_.default", (*((t((64,)),) * 6 for _ in range(4)), (), (t(()),) * 6),
               (("amsgrad", False), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("lr", 3e-4),
                ("maximize", False), ("weight_decay", 0.1)), ())
TO_BF16 = OpCall("aten._to_copy.default", (t((8, 16), offset=3, stride=(32, 1)),),
                 (("device", "cuda:0"), ("dtype", "bfloat16"), ("layout", "torch.strided")), (t((8, 16), "bfloat16"),))


# ---------------------------------------------------------------------------------------- ops log


@pytest.mark.parametrize("op", [MM, ADAMW, TO_BF16])
def test_record_round_trip_keeps_signature_offsets_and_float_values(op):
    rec = json.loads(json.dumps(encode_record(op)))
    back = decode_op(rec)
    assert signature(back) == signature(op) == rec["sig"]
    assert back == op  # floats, dtype names, device strings and storage offsets survive


def test_op_log_groups_calls_by_signature():
    log = OpLog()
    shifted = OpCall(MM.name, (t((37, 53), offset=7), MM.args[1]), (), MM.outputs)  # same signature
    for _ in range(3):
        log.note(MM, est())
    log.note(shifted, est())
    log.note(ADAMW, est(5000))
    records = log.records()
    assert len(log) == 3 and len(records) == 2
    assert records[signature(MM)]["calls"] == 4
    assert records[signature(ADAMW)]["est_ns"] == 5000


def test_ops_files_merge_and_reject_foreign_files(tmp_path):
    a, b = OpLog(), OpLog()
    a.note(MM, est())
    b.note(MM, est())
    b.note(ADAMW, est())
    for rank, log in enumerate((a, b)):
        (tmp_path / f"rank{rank}").mkdir()
        write_ops(tmp_path / f"rank{rank}" / "ops.jsonl", log.records(), gpu="h200", rank=rank)
    assert [p.parent.name for p in ops_files_in(tmp_path)] == ["rank0", "rank1"]
    merged_path = merge_rank_ops(tmp_path, 2, gpu="h200")
    assert ops_files_in(tmp_path) == [merged_path]
    merged = read_ops(merged_path)
    assert merged.records[signature(MM)]["calls"] == 2 and len(merged.records) == 2
    assert merge_ops([read_ops(merged_path), read_ops(merged_path)]).records[signature(ADAMW)]["calls"] == 2
    head = json.loads(merged_path.read_text().splitlines()[0])
    assert head["format"] == "phantora-ops" and head["version"] == 1 and head["gpu"] == "h200"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"format": "phantora-ops", "version": 99}) + "\n")
    with pytest.raises(ValueError, match="version 99"):
        read_ops(bad)
    bad.write_text(json.dumps({"format": "phantora-kernels", "version": 1, "gpu": "h200"}) + "\n")
    with pytest.raises(ValueError, match="not a Phantora ops file"):
        read_ops(bad)


# ---------------------------------------------------------------------------------------- rebuild


def test_rebuilt_tensors_have_recorded_layout_and_kwargs_are_converted():
    call = rebuild(TO_BF16, "cpu")
    x = call.args[0]
    assert x.shape == (8, 16) and x.stride() == (32, 1) and x.storage_offset() == 3 and x.dtype == torch.float32
    assert call.kwargs == {"device": torch.device("cpu"), "dtype": torch.bfloat16, "layout": torch.strided}
    out = call.run()
    assert out.dtype == torch.bfloat16 and out.shape == (8, 16)


def test_rebuilt_indices_are_in_range():
    emb = OpCall("aten.embedding.default", (t((50, 8)), t((4, 300), "int64")), (), (t((4, 300, 8)),))
    idx = rebuild(emb, "cpu").args[1]
    assert int(idx.min()) >= 0 and int(idx.max()) < 50 and len(idx.unique()) > 10
    nll = OpCall("aten.nll_loss_forward.default", (t((64, 7)), t((64,), "int64", offset=1), None, 1, -100), (),
                 (t(()), t(())))
    call = rebuild(nll, "cpu")
    assert int(call.args[1].max()) < 7 and call.args[1].storage_offset() == 1
    call.run()
    back = OpCall("aten.embedding_dense_backward.default", (t((4, 300, 8)), t((4, 300), "int64"), 50, -1, False),
                  (), (t((50, 8)),))
    assert int(rebuild(back, "cpu").args[1].max()) < 50
    index = OpCall("aten.index.Tensor", (t((5, 40)), (None, t((100,), "int64"))), (), (t((5, 100)),))
    call = rebuild(index, "cpu")
    assert call.args[1][0] is None and int(call.args[1][1].max()) < 40
    call.run()
    gather = OpCall("aten.gather.default", (t((6, 9)), 1, t((6, 30), "int64")), (), (t((6, 30)),))
    assert int(rebuild(gather, "cpu").args[2].max()) < 9


def test_domain_restricted_ops_get_positive_inputs_and_runs_are_reproducible():
    sqrt = OpCall("aten.sqrt.default", (t((1000,)),), (), (t((1000,)),))
    a, b = rebuild(sqrt, "cpu").args[0], rebuild(sqrt, "cpu").args[0]
    assert float(a.min()) > 0 and torch.equal(a, b)
    assert not torch.isnan(rebuild(sqrt, "cpu").run()).any()
    assert float(rebuild(MM, "cpu").args[0].min()) < 0  # ordinary ops: standard normal


def test_unknown_ops_and_dtypes_are_rebuild_errors():
    with pytest.raises(RebuildError, match="no operator"):
        rebuild(OpCall("aten.no_such_op.default", (t((2,)),), (), ()), "cpu")
    with pytest.raises(RebuildError, match="unknown dtype"):
        rebuild(OpCall("aten.neg.default", (t((2,), "float99"),), (), ()), "cpu")


def test_views_and_host_only_ops_are_not_measured():
    assert measurable(MM)
    assert not measurable(OpCall("aten.view.default", (t((4,)), (2, 2)), (), (t((2, 2)),)))
    assert not measurable(OpCall("aten.mm.default", (t((2, 2), device="cpu"),) * 2, (), (t((2, 2), device="cpu"),)))
    assert measurable(OpCall("aten.randn.default", ((4, 4),), (("device", "cuda"),), (t((4, 4)),)))


# ---------------------------------------------------------------------------------------- timing


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


# ---------------------------------------------------------------------------------------- pipeline


def _ops_file(tmp_path, ops):
    log = OpLog()
    for i, op in enumerate(ops):
        for _ in range(i + 1):
            log.note(op, est(1000 * (i + 1)))
    return write_ops(tmp_path / "ops.jsonl", log.records(), gpu="h200")


def test_profile_pipeline_writes_a_mergeable_database(tmp_path, capsys):
    view = OpCall("aten.view.default", (t((4,)), (2, 2)), (), (t((2, 2)),))
    broken = OpCall("aten.no_such_op.default", (t((2,)),), (), ())
    ops_path = _ops_file(tmp_path, [MM, TO_BF16, view, broken])
    out = tmp_path / "db.jsonl"
    cfg = ProfileConfig(inputs=(str(ops_path),), out=str(out), gpu="h200",
                        measure=MeasureConfig(device="cpu", warmup=1, repeat=3))
    result = profile_ops(cfg)
    assert len(result.measured) == 2 and result.free == 1 and [s["op"] for s in result.skipped] == [broken.name]
    assert [m["op"] for m in result.measured] == [TO_BF16.name, MM.name]  # heaviest first
    db = KernelDatabase.load(out)
    assert db.gpu == "h200" and db.meta["tool"] == "phantora profile" and len(db) == 2
    hit, how = db.lookup(MM)
    assert how == "exact" and hit.origin == "micro_cold" and hit.count == 3 and hit.kernel_ns > 0
    head = json.loads(out.read_text().splitlines()[0])
    assert head["format"] == "phantora-kernels" and head["version"] == 1
    report = json.loads((tmp_path / "db.report.json").read_text())
    assert report["skipped"][0]["reason"].startswith("cannot rebuild")
    assert "skipped 1 x cannot rebuild" in capsys.readouterr().err
    # merged with the shipped database, the new entries answer
    merged = load_profile("h200").kernels.value.merge(db)
    assert merged.lookup(TO_BF16)[0] == db.lookup(TO_BF16)[0]
    # --only-missing: what --out has is not measured again; the file keeps its entries
    again = profile_ops(ProfileConfig(inputs=(str(ops_path),), out=str(out), gpu="h200", only_missing=True,
                                      measure=MeasureConfig(device="cpu", warmup=0, repeat=1)))
    assert again.measured == [] and again.present == 2 and len(KernelDatabase.load(out)) == 2


def test_profile_orders_heaviest_first_and_honours_limit(tmp_path):
    ops_path = _ops_file(tmp_path, [MM, TO_BF16])  # TO_BF16: 2 calls x 2000 ns > MM: 1 x 1000
    result = profile_ops(ProfileConfig(inputs=(str(tmp_path),), out=str(tmp_path / "db.jsonl"), gpu="h200",
                                       limit=1, measure=MeasureConfig(device="cpu", warmup=0, repeat=1)))
    assert [m["op"] for m in result.measured] == [TO_BF16.name] and result.not_started == 1
    assert ops_path.exists()


def test_profile_input_errors_are_profile_errors(tmp_path):
    cfg = ProfileConfig(inputs=(str(tmp_path / "missing.jsonl"),), out=str(tmp_path / "db.jsonl"), gpu="h200",
                        measure=MeasureConfig(device="cpu"))
    with pytest.raises(ProfileError, match="no such ops file"):
        profile_ops(cfg)
    with pytest.raises(ProfileError, match="--gpu"):
        profile_ops(ProfileConfig(inputs=("x",), out="y", measure=MeasureConfig(device="cpu")))
    other = tmp_path / "h100.jsonl"
    KernelDatabase("h100").save(other)
    ops_path = _ops_file(tmp_path, [MM])
    with pytest.raises(ProfileError, match="h100 kernels"):
        profile_ops(ProfileConfig(inputs=(str(ops_path),), out=str(other), gpu="h200", measure=MeasureConfig(device="cpu")))


# ---------------------------------------------------------------------------------------- databases


def test_combined_database_precedence(tmp_path):
    first, second = KernelDatabase("h200"), KernelDatabase("h200")
    first.add(MM, DbEntry(100, 1, 5, "micro_cold", MM.name))
    second.add(MM, DbEntry(200, 1, 5, "micro_cold", MM.name))
    step = KernelDatabase("h200")
    step.add(MM, DbEntry(300, 1, 3, "llama_step", MM.name))
    paths = []
    for name, db in (("a", first), ("b", second), ("step", step)):
        db.save(tmp_path / f"{name}.jsonl")
        paths.append(tmp_path / f"{name}.jsonl")
    assert combined_database("h200", paths[:2], packaged=False).lookup(MM)[0].kernel_ns == 200  # last given wins ties
    assert combined_database("h200", paths, packaged=False).lookup(MM)[0].kernel_ns == 300  # in-step beats micro
    packaged = load_profile("h200").kernels.value
    combined = combined_database("h200", paths[:1])
    assert len(combined) == len(packaged) + 1 and combined is not packaged
    KernelDatabase("h100").save(tmp_path / "h100.jsonl")
    with pytest.raises(ValueError, match="is for h100"):
        combined_database("h200", [tmp_path / "h100.jsonl"])


def test_gpu_names():
    assert gpu_key_for_device("NVIDIA H200") == "h200"
    assert gpu_key_for_device("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_key_for_device("NVIDIA A100-SXM4-80GB") == "a100"
    assert gpu_key_for_device("NVIDIA GeForce RTX 4090") is None
    assert check_gpu_name("L40S") == "l40s"
    with pytest.raises(ValueError):
        check_gpu_name("a/b")


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_profiler_timer_never_stores_kernel_less_measurements():
    from phantora.profiler.measure import ProfilerAttributionError
    measurer = Measurer(MeasureConfig(device="cpu", warmup=0, repeat=2))  # CPU ops: the profiler sees no GPU kernel
    got = []
    measurer._profile_chunk([MM], 0, lambda i, m, r: got.append((m, r)))
    assert got == [(None, "the profiler saw no GPU kernel for this op")]
    with pytest.raises(ProfilerAttributionError, match="--timer events"):
        measurer._profile_chunk([MM, TO_BF16], 0, lambda i, m, r: None)
