"""`phantora sweep --ray`: the points as tasks of a Ray instance started here (`--ray local`), their folders
brought back into the sweep's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, SCRIPTS

pytestmark = pytest.mark.slow


def test_sweep_on_ray(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "phantora.cli.main", "sweep", "--out", str(out), "--ray", "local",
               "--grid", "batch=8,64", "--", "phantora", "run", "--gpu", "h100", "--", "python",
               str(SCRIPTS / "sweep_train.py"), "--steps", "3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr
    rows = json.loads((out / "sweep.json").read_text())["points"]
    assert [(r["batch"], r["status"]) for r in rows] == [("8", "ok"), ("64", "ok")], done.stderr
    for name in ("batch=8", "batch=64"):
        folder = out / "points" / name
        assert json.loads((folder / "point.json").read_text())["exit_code"] == 0
        assert (folder / "report.html").is_file() and (folder / "rank0" / "steps.jsonl").is_file()
        assert "--batch" in (folder / "point.json").read_text()
