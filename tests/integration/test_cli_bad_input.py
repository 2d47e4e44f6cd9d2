"""Bad input from the shell: one line on stderr, exit code 2, no traceback (the in-process fuzzing of cluster files
and flags: tests/unit/cli/test_fuzz_cluster.py)."""

import subprocess
import sys


def test_a_bad_cluster_file_from_the_shell_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('gpu = "h100"\n[nic]\nnic_gbps = 200\n')
    done = subprocess.run([sys.executable, "-m", "phantora.cli.main", "run", "--cluster", str(path), "--", __file__],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "nic_gbps" in done.stderr and "Traceback" not in done.stderr
