import json
import os
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


# --- the launcher with stand-in ranks (tests/support/stand_in_rank.py: the real protocol, no torch) ------------
@dataclass
class StandInRun:
    code: int
    out: str
    err: str
    out_dir: Path

    @property
    def summary(self) -> dict:
        return json.loads((self.out_dir / "summary.json").read_text())


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


@pytest.fixture
def simulate(tmp_path, script):
    """`phantora <command> [options] train.py ARGS`, in this process, with the stand-in as the rank program."""
    import dataclasses
    import io

    from phantora.cli.launch import launch
    from phantora.cli.main import config_from_args, parse_command_line
    from stand_in_rank import STAND_IN

    def run(command: str, *options: str, args: tuple[str, ...] = (), out: str = "out", **overrides) -> StandInRun:
        out_dir = tmp_path / out
        words = [command, "--gpu", "h200", "--out", str(out_dir), *options, script, *args]
        if command == "run":
            words.insert(len(words) - len(args) - 1, "--")
        config, _ = config_from_args(parse_command_line(words))
        config = dataclasses.replace(config, rank_entry=(sys.executable, str(STAND_IN)), shutdown_grace_s=5.0,
                                     monitor_interval_s=0.02, **overrides)
        stdout, stderr = io.StringIO(), io.StringIO()
        code = launch(config, console_out=stdout, console_err=stderr)
        return StandInRun(code, stdout.getvalue(), stderr.getvalue(), out_dir)
    return run


_LAUNCHER_DRIVER = """
import dataclasses, json, os, sys
from phantora.cli.launch import launch
from phantora.cli.main import config_from_args, parse_command_line
config, _ = config_from_args(parse_command_line(sys.argv[2:]))
overrides = json.loads(os.environ["PHANTORA_TEST_LAUNCH_OVERRIDES"])
sys.exit(launch(dataclasses.replace(config, rank_entry=(sys.executable, sys.argv[1]), **overrides)))
"""


@pytest.fixture
def start_launcher():
    """The launcher as its own process (signals, pipes) with stand-in ranks: `start_launcher(WORDS...,
    shutdown_grace_s=5)` gives the Popen (text stdout and stderr pipes)."""
    from stand_in_rank import STAND_IN

    def start(*words: str, **overrides) -> subprocess.Popen:
        overrides.setdefault("shutdown_grace_s", 5.0)
        return subprocess.Popen([sys.executable, "-c", _LAUNCHER_DRIVER, str(STAND_IN), *words],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                env={**os.environ, "PHANTORA_TEST_LAUNCH_OVERRIDES": json.dumps(overrides)})
    return start
