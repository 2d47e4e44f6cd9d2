"""Rank output on the console: the line prefix (cli/output.py)."""

import io
import socket
import subprocess
import sys

from phantora.cli.output import OutputConfig, OutputPump


def test_prefix_template_substitutes_torchruns_macros(tmp_path):
    config = OutputConfig(prefix_template="${hostname}|${role_name}|${rank}|${local_rank}: ",
                          log_dir=str(tmp_path / "logs"))
    out, err = io.StringIO(), io.StringIO()
    pump = OutputPump(config, console_out=out, console_err=err, role="trainer")
    proc = subprocess.Popen([sys.executable, "-c", "print('hello')"], **pump.popen_streams())
    pump.attach(5, 1, proc)
    proc.wait()
    pump.drain(10)
    pump.close()
    assert out.getvalue() == f"{socket.gethostname()}|trainer|5|1: hello\n"
