"""benchmarks/e2e/compare_launches.py: a real and a simulated launch timeline, aligned op by op, give the host time
between the launches both sides made."""

from benchmarks.e2e.compare_launches import Launch, op_name, segments


def test_real_and_simulated_op_names_meet():
    assert op_name("aten::mm") == op_name("aten.mm.default") == "aten.mm"
    assert op_name("aten::_foreach_copy_") == op_name("aten._foreach_copy_.default") == "aten._foreach_copy_"
    assert op_name("FSDP::all_gather") == "FSDP::all_gather"


def test_segments_run_between_launches_both_sides_made():
    real = [Launch("aten.mm", 0.0), Launch("aten.copy_", 10.0), Launch("aten.add", 12.0), Launch("aten.cumsum", 50.0)]
    simulated = [Launch("aten.mm", 0.0), Launch("aten.copy_", 9.0), Launch("aten.cumsum", 15.0)]
    found = segments(real, simulated)
    assert [(s.first.op, s.last.op, s.real_us, s.simulated_us, s.ops) for s in found] == [
        ("aten.mm", "aten.copy_", 10.0, 9.0, 1),
        ("aten.copy_", "aten.cumsum", 40.0, 6.0, 2),  # the real side's extra launch falls inside the segment
    ]
