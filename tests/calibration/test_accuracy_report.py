"""benchmarks/e2e/report.py: the accuracy table of docs/accuracy.md from the benchmarks' stored rows."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "benchmarks" / "e2e" / "report.py"
_spec = importlib.util.spec_from_file_location("accuracy_report", REPORT)
report = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = report  # dataclasses look their module up
_spec.loader.exec_module(report)

SPLIT = """
config = [
  { name = "llama_fit", set = "fitting", gpu = "h200", source = "data/h200/e2e/groundtruth/llama_fit.json" },
  { name = "loop_out", set = "held_out", gpu = "h200", source = "data/h200/e2e/frameworks/loop_out.log" },
  { name = "loop_out", set = "held_out", gpu = "h100", source = "data/h100/e2e/frameworks/loop_out.log" },
]
"""
# As benchmarks/e2e/accuracy.py --json writes a row: (measured, predicted) pairs.
FITTING_ROW = {"name": "llama_fit", "spread_ms": [99.0, 101.0], "step_ms": [100.0, 95.0],
               "reserved_gib": [10.0, 11.0], "allocated_gib": [8.0, 8.0], "wall_s_per_step": 1.0,
               "rss_gib": 0.4, "generic_ops": {}}
# As benchmarks/e2e/frameworks/accuracy.py --json writes a row: measured and predicted records, seconds.
FRAMEWORK_ROWS = [
    {"name": "loop_out", "gpu": "h200", "measured": {"step_s": 0.2, "reserved_gib": 20.0, "allocated_gib": 18.0},
     "predicted": {"step_s": 0.21, "reserved_gib": 20.0, "allocated_gib": 18.0, "wall_s": 3.0, "rss_gib": 0.5,
                   "generic_ops": 0}},
    {"name": "loop_out", "gpu": "h100", "measured": {"step_s": 0.25, "reserved_gib": 20.0, "allocated_gib": 18.0},
     "predicted": None},
]
DOC = "# Accuracy\n\nbefore\n\n<!-- table:begin -->\nstale\n<!-- table:end -->\n\nafter\n"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "split.toml").write_text(SPLIT)
    (tmp_path / "accuracy.md").write_text(DOC)
    (tmp_path / "fitting.json").write_text(json.dumps([FITTING_ROW]))
    (tmp_path / "frameworks.json").write_text(json.dumps(FRAMEWORK_ROWS))
    return {"root": tmp_path, "split": tmp_path / "split.toml", "doc": tmp_path / "accuracy.md",
            "data": tmp_path / "data"}


def run(tree: dict[str, Path], *extra: str) -> int:
    return report.main(["--split", str(tree["split"]), "--doc", str(tree["doc"]), "--data", str(tree["data"]), *extra])


def import_both(tree: dict[str, Path]) -> None:
    rows = [str(tree["root"] / "fitting.json"), str(tree["root"] / "frameworks.json")]
    assert run(tree, "--import", *rows, "--commit", "abc1234", "--date", "2026-11-26") == 0


def table_rows(doc: str) -> list[list[str]]:
    body = doc[doc.index(report.BEGIN):doc.index(report.END)]
    lines = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| set ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if "---" not in line]


def test_rows_are_stored_per_gpu_with_their_set_and_commit(tree):
    import_both(tree)
    h200 = json.loads((tree["data"] / "h200" / "e2e" / "accuracy" / "rows.json").read_text())
    h100 = json.loads((tree["data"] / "h100" / "e2e" / "accuracy" / "rows.json").read_text())
    by_name = {row["name"]: row for row in h200["rows"]}
    assert by_name["llama_fit"]["set"] == "fitting" and by_name["loop_out"]["set"] == "held_out"
    assert by_name["llama_fit"]["step_ms"] == [100.0, 95.0]  # the benchmark's own format, kept
    assert by_name["llama_fit"]["commit"] == "abc1234"
    assert [row["gpu"] for row in h100["rows"]] == ["h100"]


def test_table_has_one_row_per_configuration_with_both_sets_and_each_gpu_side_by_side(tree):
    import_both(tree)
    doc = tree["doc"].read_text()
    assert "| set | config | H200 step ms | H200 reserved GiB | H100 step ms | H100 reserved GiB |" in doc
    fitting, held_out = table_rows(doc)
    assert fitting == ["fitting", "llama_fit", "100.0 → 95.0 (-5.0 %)", "10.00 → 11.00 (+10.0 %)", "", ""]
    assert held_out[:3] == ["held out", "loop_out", "200.0 → 210.0 (+5.0 %)"]
    assert held_out[4:] == ["250.0 → failed", "20.00 → failed"]


def test_summary_has_one_line_per_set_and_gpu(tree):
    import_both(tree)
    doc = tree["doc"].read_text()
    assert "**fitting, h200** (1 configurations): step time |error| mean 5.0 %, max 5.0 %; " \
           "peak reserved memory |error| mean 10.0 %, max 10.0 %." in doc
    assert "**held out, h100** (1 configurations, 1 failed)" in doc
    assert doc.startswith("# Accuracy\n\nbefore\n") and doc.endswith("\nafter\n")


def test_check_fails_on_a_stale_doc_and_passes_once_rewritten(tree):
    import_both(tree)
    assert run(tree, "--check") == 0
    tree["doc"].write_text(tree["doc"].read_text().replace("95.0", "96.0"))
    assert run(tree, "--check") == 1
    assert "96.0" in tree["doc"].read_text()  # --check changed nothing
    assert run(tree) == 0 and run(tree, "--check") == 0


def test_a_rerun_replaces_only_its_own_rows(tree):
    import_both(tree)
    rerun = tree["root"] / "rerun.json"
    rerun.write_text(json.dumps([{**FITTING_ROW, "step_ms": [100.0, 101.0]}]))
    assert run(tree, "--import", str(rerun), "--commit", "def5678", "--date", "2026-11-27") == 0
    stored = json.loads((tree["data"] / "h200" / "e2e" / "accuracy" / "rows.json").read_text())["rows"]
    assert sorted((row["name"], row["commit"]) for row in stored) == [("llama_fit", "def5678"), ("loop_out", "abc1234")]
    assert "at commit def5678 (2026-11-27)" in tree["doc"].read_text()


def test_a_configuration_outside_the_split_is_refused(tree):
    stray = tree["root"] / "stray.json"
    stray.write_text(json.dumps([{**FITTING_ROW, "name": "never_split"}]))
    with pytest.raises(ValueError, match="never_split"):
        run(tree, "--import", str(stray), "--commit", "abc1234", "--date", "2026-11-26")


def test_the_shipped_split_holds_both_sets_and_the_doc_is_current():
    split = report.load_split()
    sets = {entry["set"] for entry in split.values()}
    assert sets == {"fitting", "held_out"}
    assert sum(entry["set"] == "fitting" for entry in split.values()) == 26
    assert report.main(["--check"]) == 0


# As benchmarks/e2e/published/torchtitan_llama3.py stores its results (the fields the doc shows).
PUBLISHED_RESULTS = {"source": "TorchTitan's table", "settings": {}, "runs": [
    {"name": "fsdp_8gpu", "gpus": 8, "nodes": 1, "steps": 6, "commit": "abc1234", "date": "2026-11-26",
     "published": {"tokens_per_s_per_gpu": 5000, "memory_gib": 80.0},
     "predicted": {"tokens_per_s_per_gpu": 4750.0, "memory_gib": 82.0}, "wall_s": 240.0,
     "summary": {"representative_ranks": 8}},
    {"name": "fsdp_128gpu", "gpus": 128, "nodes": 16, "steps": 6, "commit": "abc1234ffff+dirty", "date": "2026-11-26",
     "published": {"tokens_per_s_per_gpu": 4000, "memory_gib": 60.0},
     "predicted": {"tokens_per_s_per_gpu": 4200.0, "memory_gib": 60.0}, "wall_s": 300.0,
     "summary": {"representative_ranks": 8}},
]}
PUBLISHED_SECTION = "\n## Published\n\n<!-- published:begin -->\nstale\n<!-- published:end -->\n"


def test_published_runs_get_their_own_table_where_the_doc_asks_for_it(tree):
    import_both(tree)
    results = tree["root"] / "published.json"
    results.write_text(json.dumps(PUBLISHED_RESULTS))
    tree["doc"].write_text(tree["doc"].read_text() + PUBLISHED_SECTION)
    assert run(tree, "--published", str(results)) == 0
    doc = tree["doc"].read_text()
    assert "| fsdp_8gpu | 8 | 8 | 5,000 | 4,750 | -5.0 % | 80.0 | 82.00 | +2.5 % | 240 | abc1234, 2026-11-26, 6 steps |" \
        in doc
    assert "| fsdp_128gpu | 128 | 8 | 4,000 | 4,200 | +5.0 % | 60.0 | 60.00 | +0.0 % | 300 | abc1234+dirty," in doc
    assert "stale" not in doc
    assert run(tree, "--published", str(results), "--check") == 0


def test_published_markers_without_results_are_an_error(tree, capsys):
    import_both(tree)
    tree["doc"].write_text(tree["doc"].read_text() + PUBLISHED_SECTION)
    assert run(tree, "--published", str(tree["root"] / "missing.json")) == 1
    assert "missing.json does not exist" in capsys.readouterr().err


def test_framework_rows_are_summarised_per_framework_and_gpu():
    rows = [report.Comparison("ds_a", "h200", "held_out", (100.0, 90.0), (1.0, 1.0)),
            report.Comparison("ds_b", "h200", "held_out", (100.0, 104.0), (1.0, 1.0)),
            report.Comparison("tt_a", "h200", "held_out", (100.0, None), (1.0, None)),
            report.Comparison("llama_fit", "h200", "fitting", (100.0, 50.0), (1.0, 1.0))]
    lines = report.framework_summary(rows, {"ds_a": "DeepSpeed", "ds_b": "DeepSpeed", "tt_a": "TorchTitan"})
    assert lines == ["DeepSpeed (h200, 2): mean 7.0 %, max 10.0 %", "TorchTitan (h200, 0): none"]
    shipped = report.frameworks_by_config()
    assert shipped["deepspeed_zero3_llama1b_4gpu"] == "DeepSpeed" and shipped["torchtitan_llama3_8b_hsdp2x2"] == "TorchTitan"


def test_a_fitting_configuration_on_another_gpu_is_scored_against_its_run_there():
    """benchmarks/e2e/accuracy.py --gpu h100: the H100's llama_l1b_ac_1gpu is the run split.toml names, not the
    H200's measurement."""
    from benchmarks.e2e import accuracy

    config = next(c for c in json.loads(accuracy.CONFIGS.read_text())["configs"] if c["name"] == "llama_l1b_ac_1gpu")
    source = accuracy.REPO / report.load_split()[("llama_l1b_ac_1gpu", "h100")]["source"]
    line = json.loads(source.read_text().strip().splitlines()[-1])
    on_h100 = accuracy.measured(config, "h100")
    assert on_h100["step_ms"] == pytest.approx(1e3 * line["step_s_median"])
    assert on_h100["max_mem_reserved_gib"] == line["max_mem_reserved_gib"]
    assert on_h100["step_ms"] != accuracy.measured(config)["step_ms"]
