"""Start rank processes, pass their output through, and report when they end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from phantora.config.run import CONFIG_ENV_VAR, RankConfig
from phantora.reports.summary import build_summary, print_summary, write_summary


class LaunchError(Exception):
    """The simulation could not be started (printed as one line)."""


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """The user's program: a script path or a module, and its arguments (passed through untouched)."""

    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        head = ["-m", self.module] if self.module else [self.script]
        return [*head, *self.args]


def _prepare_native_shim() -> None:
    from phantora.runtime.native import NativeBuildError, build_shim
    try:
        build_shim()
    except NativeBuildError as error:
        raise LaunchError(str(error)) from None


def run_single_process(config: RankConfig, program: ProgramSpec) -> int:
    """Simulate `program` as one process on `config.devices_per_process` simulated GPUs."""
    _prepare_native_shim()
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env[CONFIG_ENV_VAR] = config.to_env()
    env.setdefault("PYTHONUNBUFFERED", "1")
    command = [sys.executable, "-m", "phantora.runtime.bootstrap", *program.argv()]
    started = time.monotonic()
    child = subprocess.Popen(command, env=env)
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        try:
            code = child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
        code = 130 if code >= 0 else code
    wall_s = time.monotonic() - started
    summary = build_summary(config, out_dir, exit_code=code, wall_s=wall_s)
    write_summary(summary, out_dir)
    print_summary(summary, file=sys.stderr)
    if code != 0:
        reason = "interrupted" if code == 130 else f"exited with code {code}"
        print(f"phantora: error: the program {reason}; partial results are in {out_dir}/", file=sys.stderr)
    return code if code >= 0 else 128 - code
