"""`phantora sweep` end to end on a tiny program: three points (one runs out of memory), the table, the plot, the
fastest under a cap, every point's report.html and step marks, and a resumed sweep that reruns only what is not
done."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, SCRIPTS

pytestmark = pytest.mark.slow


def _sweep(out, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "phantora.cli.main", "sweep", "--out", str(out), "--grid", "hold-gib=0,1,200",
               "--metric", "tokens_per_s=tokens/s: ([0-9.]+)", "--max-memory", "40", *extra,
               "--", "phantora", "run", "--gpu", "h100", "--", "python", str(SCRIPTS / "sweep_train.py"), "--steps", "4"]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)


def test_sweep_resume_and_table(tmp_path):
    out = tmp_path / "sweep"
    done = _sweep(out)
    assert done.returncode == 0, done.stderr
    table = json.loads((out / "sweep.json").read_text())
    rows = {r["hold-gib"]: r for r in table["points"]}
    assert [rows[k]["status"] for k in ("0", "1", "200")] == ["ok", "ok", "oom"], done.stderr
    for key in ("0", "1"):
        assert rows[key]["step_time_s"] > 0 and rows[key]["steps"] == 2 and rows[key]["tokens_per_s"] > 0
    # holding 1 GiB more shows in the peak; the step does not change
    assert rows["1"]["peak_reserved_gib"] == pytest.approx(rows["0"]["peak_reserved_gib"] + 1, abs=0.01)
    assert rows["200"]["peak_reserved_gib"] > 40
    assert table["best"] in ("hold-gib=0", "hold-gib=1") and "fastest within 40 GiB" in done.stdout
    points = out / "points"
    marks = (points / "hold-gib=0" / "rank0" / "steps.jsonl").read_text().splitlines()
    assert len(marks) == 4  # one per optimizer step
    for name, printed in (("hold-gib=0", "tokens/s:"), ("hold-gib=1", "tokens/s:"), ("hold-gib=200", "OutOfMemoryError")):
        assert printed in (points / name / "report.html").read_text()  # the program's own output
    assert (out / "sweep.png").stat().st_size > 10_000 and (out / "sweep.csv").is_file()
    assert "[3/3]" in done.stderr and "ETA" in done.stderr

    # resume: nothing to run; then one point forgotten (as if interrupted) runs again, alone
    before = {p.name: (p / "summary.json").stat().st_mtime_ns for p in points.iterdir()}
    again = _sweep(out)
    assert again.returncode == 0 and "3 done earlier, 0 to run" in again.stderr
    record = json.loads((points / "hold-gib=1" / "point.json").read_text())
    record["exit_code"] = 130
    (points / "hold-gib=1" / "point.json").write_text(json.dumps(record))
    third = _sweep(out)
    assert "2 done earlier, 1 to run" in third.stderr
    after = {p.name: (p / "summary.json").stat().st_mtime_ns for p in points.iterdir()}
    assert [n for n in before if before[n] != after[n]] == ["hold-gib=1"]


def test_an_interrupted_sweep_stops_its_points_and_resumes(tmp_path):
    import signal
    import time

    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "phantora.cli.main", "sweep", "--out", str(out), "--jobs", "1",
               "--grid", "batch=8,16", "--", "phantora", "run", "--gpu", "h100", "--", "python",
               str(SCRIPTS / "sweep_train.py"), "--steps", "3"]
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    first = out / "points" / "batch=8"
    deadline = time.monotonic() + 120
    while not (first / "output.log").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the point's launcher is up and has its signal handlers
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130 and "interrupted" in err, err
    assert "exit_code" not in json.loads((first / "point.json").read_text())  # stopped: not done
    assert not (out / "points" / "batch=16").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert again.returncode == 0 and "0 done earlier, 2 to run" in again.stderr, again.stderr
    assert [r["status"] for r in json.loads((out / "sweep.json").read_text())["points"]] == ["ok", "ok"]
