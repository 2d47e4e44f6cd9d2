import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@dataclass
class PhantoraRun:
    code: int
    stdout: str
    stderr: str
    out_dir: Path

    @property
    def summary(self) -> dict:
        return json.loads((self.out_dir / "summary.json").read_text())

    def tagged_json(self, tag: str) -> dict:
        for line in self.stdout.splitlines():
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1:])
        raise AssertionError(f"no {tag} line in output:\n{self.stdout}\n{self.stderr}")


@pytest.fixture
def phantora(tmp_path):
    def run(*args: str, gpu: str = "h200", extra: tuple[str, ...] = (), timeout: int = 600) -> PhantoraRun:
        out_dir = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", gpu, "--out", str(out_dir),
                   *extra, "--", "python", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        return PhantoraRun(done.returncode, done.stdout, done.stderr, out_dir)
    return run
