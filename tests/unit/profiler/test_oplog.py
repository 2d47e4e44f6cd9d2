"""The ops log (profiler/oplog.py): counting calls by signature, writing, reading and merging ops files."""

import json

import pytest
from profiled_ops import ADAMW, MM, TO_BF16, est, t

from phantora.models.opcall import decode_op, signature
from phantora.models.ops import OpCall
from phantora.profiler.oplog import OpLog, encode_record, merge_ops, merge_rank_ops, ops_files_in, read_ops, write_ops


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
    merged_path = merge_rank_ops(tmp_path, range(2), gpu="h200")
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
