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


@pytest.fixture
def torchrun(tmp_path):
    """`phantora torchrun --gpu h200 --nproc-per-node N SCRIPT ARGS`; stdout lines keep their [rankN]: prefix."""
    def run(nproc: int, *args: str, env: dict | None = None, timeout: int = 600) -> PhantoraRun:
        out_dir = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        command = [sys.executable, "-m", "phantora.cli.main", "torchrun", "--gpu", "h200", "--out", str(out_dir),
                   "--nproc-per-node", str(nproc), *args]
        import os
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              env={**os.environ, **(env or {})})
        return PhantoraRun(done.returncode, done.stdout, done.stderr, out_dir)
    return run


def rank_json(run: PhantoraRun, tag: str) -> dict[int, dict]:
    """Each rank's `TAG {json}` line, by rank."""
    found = {}
    for line in run.stdout.splitlines():
        prefix, _, rest = line.partition(":")
        if prefix.startswith("[rank") and rest.startswith(tag + " "):
            found[int(prefix[5:-1])] = json.loads(rest[len(tag) + 1:])
    return found
