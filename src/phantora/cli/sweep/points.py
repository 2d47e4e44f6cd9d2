"""Running one point: a `phantora` process of its own, so a point that crashes (or a simulator bug it hits)
cannot take the sweep down; what it printed goes to the point's `output.log`, the sweep records how it ended
in `point.json`.

A point is done, and a resumed sweep skips it, when its `point.json` names the same command and environment
and records an exit code of a run that ended by itself: completed, or failed in the program (an OOM, an error),
which would fail the same way again (runs are deterministic). A run stopped by a signal (the sweep
interrupted) is not done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phantora.cli.sweep.grid import Point
from phantora.reports.sweep import LOG_FILE, POINT_FILE

_SIGNALS_THAT_INTERRUPT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL)
_OUT_PLACEHOLDER = "{out}"
"""The point's own folder in the command `point.json` records (the sweep's folder may move)."""


def interrupted(exit_code: int) -> bool:
    """Whether a run's exit code says a signal stopped it (the launcher's 128+N, or Popen's -N)."""
    return exit_code < 0 or exit_code in {128 + s for s in _SIGNALS_THAT_INTERRUPT}


@dataclass(frozen=True, slots=True)
class PointRun:
    """A point and its folder."""

    point: Point
    folder: Path

    def record(self) -> dict[str, Any]:
        """What point.json says of the point before its run ends: settings, command, environment."""
        return {"name": self.point.name, "settings": self.point.settings,
                "command": ["phantora", *self.point.phantora_args(_OUT_PLACEHOLDER)], "env": self.point.env}

    def done(self) -> bool:
        try:
            recorded = json.loads((self.folder / POINT_FILE).read_text())
        except (OSError, ValueError):
            return False
        same = all(recorded.get(key) == value for key, value in self.record().items())
        code = recorded.get("exit_code")
        return same and isinstance(code, int) and not interrupted(code)

    def start(self, cwd: Path | None = None) -> subprocess.Popen:
        """Start the point's run (its own session: the sweep signals the point's launcher and nothing else);
        point.json is written without an exit code until it ends."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / POINT_FILE).write_text(json.dumps(self.record(), indent=1))
        log = open(self.folder / LOG_FILE, "wb")  # noqa: SIM115 (the child holds it; closed below)
        try:
            return subprocess.Popen([sys.executable, "-m", "phantora.cli.main", *self.point.phantora_args(self.folder)],
                                    env={**os.environ, **self.point.env}, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
        finally:
            log.close()

    def finish(self, exit_code: int, wall_s: float) -> None:
        (self.folder / POINT_FILE).write_text(json.dumps({**self.record(), "exit_code": exit_code,
                                                          "wall_s": round(wall_s, 3)}, indent=1))


def run_point(run: PointRun, cwd: Path | None = None) -> int:
    """Run a point to its end here (a Ray task runs this on its node); returns the exit code."""
    started = time.monotonic()
    process = run.start(cwd)
    code = process.wait()
    run.finish(code, time.monotonic() - started)
    return code
