"""A framework row measured again on other leases is compared by the median of its runs' step times, its memory its
own log's (benchmarks/e2e/frameworks/accuracy.py)."""

import json

from benchmarks.e2e.frameworks import accuracy

CONFIG = {"name": "loop", "world": 1, "script": "examples/hf_llama_loop.py", "args": []}


def write_log(path, step_s: float, reserved_gib: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = {"script": "hf_llama_loop", "step_s_median": step_s, "max_mem_reserved_gib": reserved_gib,
            "max_mem_alloc_gib": 1.0}
    path.write_text("step 1: ...\n" + json.dumps(line) + "\n")


def test_repeats_on_other_leases_pool_the_step_time_and_leave_the_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(accuracy, "DATA", tmp_path)
    frameworks = tmp_path / "h200" / "e2e" / "frameworks"
    write_log(frameworks / "loop.log", 0.010, 2.0)
    assert accuracy.measured_result("h200", CONFIG) == {"step_s": 0.010, "reserved_gib": 2.0, "allocated_gib": 1.0,
                                                        "runs": 1}
    write_log(frameworks / "repeats" / "loop.log", 0.014, 9.0)
    write_log(frameworks / "repeats" / "runs" / "2026-11-28-07" / "loop.log", 0.011, 9.0)
    write_log(frameworks / "repeats" / "runs" / "2026-11-28-07" / "other.log", 0.5, 9.0)
    found = accuracy.measured_result("h200", CONFIG)
    assert (found["step_s"], found["runs"], found["reserved_gib"]) == (0.011, 3, 2.0)


def test_a_row_without_its_own_log_has_no_measurement_whatever_its_repeats(tmp_path, monkeypatch):
    monkeypatch.setattr(accuracy, "DATA", tmp_path)
    write_log(tmp_path / "h200" / "e2e" / "frameworks" / "repeats" / "loop.log", 0.014, 9.0)
    assert accuracy.measured_result("h200", CONFIG) is None
