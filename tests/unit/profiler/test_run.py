"""`phantora profile`'s pipeline (profiler/run.py): ops files in, a kernel database out, heaviest first."""

import json

import pytest
from profiled_ops import MM, TO_BF16, est, t

from phantora.models.compute import KernelDatabase
from phantora.models.ops import OpCall
from phantora.profiler.measure import MeasureConfig
from phantora.profiler.oplog import OpLog, write_ops
from phantora.profiler.run import ProfileConfig, ProfileError, profile_ops
from phantora.specs import load_profile


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
