"""A sweep's table (rows from the points' files, statuses, metrics, CSV/JSON, plot), the fastest point under a
memory cap, the step time from step marks, report.html's breakdown arithmetic and pages."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from phantora.cli.main import main
from phantora.reports.html import (RankIntervals, ReportError, window_breakdown, whole_run_breakdown,
                                   write_run_html, write_sweep_html)
from phantora.reports.steps import load_step_marks, steady_step
from phantora.reports.sweep import Metric, best_row, point_row, write_plot, write_table


def _summary(**overrides) -> dict:
    summary = {"gpu": "h100", "gpu_name": "NVIDIA H100", "cluster": {"nodes": 1, "gpus_per_node": 1}, "world_size": 1,
               "exit_code": 0, "complete": True, "simulated_time_s": 0.010, "mfu_vs_bf16_peak": 0.4,
               "peak_reserved_gib": 10.0, "peak_allocated_gib": 9.0, "ooms": 0, "warnings": [],
               "per_rank": [{"rank": 0, "end_s": 0.010, "compute_s": 0.006, "nccl_s": 0.002, "exposed_comm_s": 0.001,
                             "sleep_s": 0.0}]}
    summary.update(overrides)
    return summary


def _point(folder: Path, *, exit_code: int | None = 0, summary: dict | None = None, marks: list[int] = (),
           log: str = "") -> Path:
    folder.mkdir(parents=True)
    record = {"name": folder.name}
    if exit_code is not None:
        record["exit_code"] = exit_code
    (folder / "point.json").write_text(json.dumps(record))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "rank0").mkdir()
    (folder / "rank0" / "steps.jsonl").write_text("".join(json.dumps({"optimizer": 0, "host_ns": t}) + "\n"
                                                          for t in marks))
    (folder / "output.log").write_text(log)
    return folder


def test_steady_step_leaves_the_first_steps_out():
    assert steady_step([]) is None and steady_step([5]) is None
    one = steady_step([0, 100])
    assert one.step_s == 100e-9 and one.steps == 1 and one.window_ns == (0, 100)
    # steps: 100 (warm-up, left out), 10, 12, 11, 50 -> median 11.5; the steady step closest to it, the last such
    step = steady_step([0, 100, 110, 122, 133, 183])
    assert step.steps == 4 and step.step_s == pytest.approx(11.5e-9) and step.window_ns == (122, 133)


def test_step_marks_of_the_first_optimizer(tmp_path):
    (tmp_path / "rank0").mkdir()
    lines = [{"optimizer": 0, "host_ns": 10}, {"optimizer": 1, "host_ns": 11}, {"optimizer": 0, "host_ns": 20}]
    (tmp_path / "rank0" / "steps.jsonl").write_text("\n".join(map(json.dumps, lines)) + '\n{"optimizer": 0, "ho')
    assert load_step_marks(tmp_path, 0) == [10, 20]  # the other optimizer's and the line cut short left out
    assert load_step_marks(tmp_path, 1) == []


def test_point_rows_and_statuses(tmp_path):
    tokens = Metric.parse("tokens_per_s=tokens/s: ([0-9,.]+)")
    ok = _point(tmp_path / "ok", summary=_summary(), marks=[0, 10**9, 2 * 10**9, 3 * 10**9],
                log="tokens/s: 900\ntokens/s: 1,000.5\n")
    row = point_row(ok, {"batch": "4"}, [tokens])
    assert row["batch"] == "4" and row["status"] == "ok" and row["step_time_s"] == 1.0 and row["steps"] == 2
    assert row["tokens_per_s"] == 1000.5 and row["throughput"] == 1000.5 and row["peak_reserved_gib"] == 10.0
    no_metric = point_row(ok, {}, [])
    assert no_metric["throughput"] == 1.0  # steps per second
    oom = _point(tmp_path / "oom", exit_code=1, summary=_summary(ooms=1, complete=False, error="rank 0 exited"))
    assert point_row(oom, {}, [])["status"] == "oom"
    traceback = _point(tmp_path / "tb", exit_code=1, summary=_summary(complete=False),
                       log="torch.OutOfMemoryError: CUDA out of memory.\n")
    assert point_row(traceback, {}, [])["status"] == "oom"
    crashed = _point(tmp_path / "err", exit_code=2, log="phantora: error: unknown GPU 'z9'\n")
    row = point_row(crashed, {}, [])
    assert row["status"] == "error" and row["error"] == "phantora: error: unknown GPU 'z9'"
    assert point_row(_point(tmp_path / "new", exit_code=None), {}, [])["status"] == "pending"
    with pytest.raises(ValueError):
        Metric.parse("no regex")


def test_best_under_the_cap_and_the_table(tmp_path):
    def row(folder, status, throughput, reserved):
        return {"batch": folder, "status": status, "throughput": throughput, "peak_reserved_gib": reserved,
                "folder": folder, "step_time_s": None, "mfu": None, "peak_allocated_gib": None, "error": None}
    rows = [row("a", "ok", 100.0, 30.0), row("b", "ok", 300.0, 70.0), row("c", "oom", None, 80.0),
            row("d", "ok", 200.0, 50.0), row("e", "error", None, None)]
    assert best_row(rows, None)["folder"] == "b"
    assert best_row(rows, 60.0)["folder"] == "d"
    assert best_row(rows, 60.0)["folder"] == "d"
    assert best_row(rows, 10.0) is None
    table = write_table(rows, tmp_path, axes=["batch"], metrics=[], max_memory_gib=60.0)
    assert table["best"] == "d" and json.loads((tmp_path / "sweep.json").read_text())["best"] == "d"
    with open(tmp_path / "sweep.csv") as f:
        read = list(csv.DictReader(f))
    assert [r["batch"] for r in read] == ["a", "b", "c", "d", "e"] and read[2]["status"] == "oom"
    assert write_plot(table, tmp_path).stat().st_size > 10_000
    page = write_sweep_html(table, tmp_path, "points").read_text()
    assert "Fastest within 60 GiB: <b>batch=d</b>" in page and page.count("<circle") == 4  # a, b, d ringed
    assert "<path" in page  # the OOM point's cross
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_window_breakdown_by_hand():
    # kernels 0-40 and 60-70, a collective 30-50 (10 under compute, 10 exposed), a sleep 80-90, window 0-100
    rank = RankIntervals(kernels=[(0, 40), (60, 70)], collectives=[(30, 50)], sleeps=[(80, 90)])
    assert window_breakdown(rank, (0, 100)) == {"compute": 40, "overlapped": 10, "exposed": 10, "host_bound": 30,
                                                "idle": 10}
    assert window_breakdown(rank, (35, 65)) == {"compute": 5, "overlapped": 5, "exposed": 10, "host_bound": 10,
                                                "idle": 0}
    parts = whole_run_breakdown(_summary()["per_rank"][0], 0.012)
    assert parts == {"compute": 5_000_000, "overlapped": 1_000_000, "exposed": 1_000_000, "host_bound": 3_000_000,
                     "idle": 2_000_000}
    assert sum(parts.values()) == 12_000_000


def test_run_page_from_the_files(tmp_path):
    out = _point(tmp_path / "run", summary=_summary(), marks=[0, 4000, 8000, 12000], log="step 1 <ok>\n")
    (out / "rank0" / "memory.json").write_text(json.dumps({"time_s": [0.0, 0.001], "allocated_bytes": [0, 2**30],
                                                          "reserved_bytes": [2**30, 2**30]}))
    events = [{"name": "aten.mm", "cat": "gemm", "ph": "X", "pid": 0, "tid": 1, "ts": 8.0, "dur": 2.0},
              {"name": "nccl:all_reduce", "cat": "nccl", "ph": "X", "pid": 0, "tid": 2, "ts": 9.0, "dur": 2.0}]
    (out / "trace.json").write_text('{"displayTimeUnit": "ms", "traceEvents": [\n'
                                    + ",\n".join(json.dumps(e) for e in events) + "\n]}\n")
    page = write_run_html(out).read_text()
    assert "step time</th><td>0.00 ms (median of 2 steady step(s), rank 0)" in page
    assert "aten.mm" in page and "nccl:all_reduce" in page and "step 1 &lt;ok&gt;" in page
    assert page.count("<svg") == 3 and "<polyline" in page
    (out / "summary.json").unlink()
    with pytest.raises(ReportError):
        write_run_html(out)


def test_report_command_rebuilds(tmp_path, capsys):
    out = _point(tmp_path / "run", summary=_summary())
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file() and capsys.readouterr().out.strip().endswith("report.html")
    assert "No trace.json" in (out / "report.html").read_text()
