"""A cluster file's GPU variant reaches the rank process (through its RankConfig) and the summary."""

import json
import subprocess
import sys

from conftest import REPO, SCRIPTS

GRAND_TETON = """gpu = "h100"
[variant]
name = "NVIDIA H100"
memory_gbytes = 96
memory_type = "HBM2e"
memory_bandwidth_gbytes_per_s = 2400
power_limit_w = 500
"""


def test_the_96_gb_h100_runs_what_the_80_gb_one_cannot(tmp_path):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(GRAND_TETON)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "phantora.cli.main", "run", "--cluster", str(cluster), "--out", str(out),
                           "--", "python", str(SCRIPTS / "variant_probe.py")],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "PROBE NVIDIA H100 102020992205" in done.stdout  # 85017493504 x 96 / 80
    assert "PROBE fits 86 GiB" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gpu_name"] == "NVIDIA H100" and summary["variant"]["of"] == "h100"
    assert "kernel times" in summary["variant"]["derived"]
    assert "variant of h100" in done.stderr  # the summary table
