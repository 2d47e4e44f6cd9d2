"""report.html in a real headless Chromium (Debian's package; .ci/run installs it): a run's page and a sweep's
load without console errors, their SVG charts draw (pixels of the charts' colours in a screenshot), and the
sweep's table sorts when a column is clicked."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SCRIPTS
from phantora.reports.html import write_sweep_html
from phantora.reports.sweep import write_table

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
_BLUE = (0x4C, 0x72, 0xB0)
"""The charts' compute / "fits" colour (reports/html.py, svg.py)."""


def _browser() -> str:
    found = next((path for path in map(shutil.which, BROWSERS) if path), None)
    if found is None:
        pytest.skip("no Chromium on this machine: apt-get install chromium-headless-shell (.ci/run installs it)")
    return found


def _chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *args, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line]


def _drawn(page: Path, tmp_path: Path, height: int) -> int:
    """How many pixels of the charts' blue a screenshot of `page` has."""
    from matplotlib.image import imread
    shot = tmp_path / f"{page.parent.name}.png"
    done = _chromium(page, tmp_path, f"--screenshot={shot}", f"--window-size=1000,{height}")
    assert shot.is_file(), done.stderr[-2000:]
    pixels = (imread(shot)[:, :, :3] * 255).round()
    return int(((abs(pixels - _BLUE)).max(axis=2) <= 2).sum())


def test_run_and_sweep_pages_in_chromium(tmp_path):
    _browser()
    out = tmp_path / "run"
    command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h100", "--out", str(out), "--", "python",
               str(SCRIPTS / "sweep_train.py"), "--steps", "4", "--bf16"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr
    page = out / "report.html"
    done = _chromium(page, tmp_path, "--dump-dom")
    assert done.returncode == 0 and not _console(done.stderr), _console(done.stderr)
    svgs = re.findall(r"<svg.*?</svg>", done.stdout, flags=re.S)
    assert len(svgs) == 3 and all(svg.count("<rect") + svg.count("<polyline") > 3 for svg in svgs)
    assert _drawn(page, tmp_path, 2400) > 500

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = [{"batch": str(b), "status": s, "throughput": t, "peak_reserved_gib": m, "folder": f"batch={b}",
             "step_time_s": None, "mfu": None, "peak_allocated_gib": None, "wall_s": 1.0, "error": None}
            for b, s, t, m in ((1, "ok", 10.0, 20.0), (2, "ok", 30.0, 35.0), (4, "oom", None, 80.0))]
    write_sweep_html(write_table(rows, sweep, axes=["batch"], metrics=[], max_memory_gib=40.0), sweep, "points")
    page = sweep / "report.html"
    assert _drawn(page, tmp_path, 1200) > 100
    # click the throughput column twice (descending): its script reorders the rows
    probe = sweep / "probe.html"
    probe.write_text(page.read_text().replace("</body>", "<script>var h = document.querySelectorAll('th.sortable')[3];"
                     "h.click(); h.click(); document.body.dataset.first = "
                     "document.querySelectorAll('tr')[1].children[0].textContent;</script></body>"))
    done = _chromium(probe, tmp_path, "--dump-dom")
    assert not _console(done.stderr), _console(done.stderr)
    assert 'data-first="2"' in done.stdout
