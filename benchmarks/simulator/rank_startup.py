"""Rank start-up: how long a simulated job takes before its ranks can run the program, per rank.

    python -m benchmarks.simulator.rank_startup                      # 1, 8 and 32 ranks, fork server off and on
    python -m benchmarks.simulator.rank_startup --ranks 8 --fork-server on

Each run is `phantora torchrun --gpu h200 --ranks all` (1 and 8 ranks: one node; 32: 4 nodes of 8) of a program
that only starts: `init_process_group("nccl")`, one `barrier()`, a `ready` line, `destroy_process_group()`. Measured
from outside, with the fork server (`PHANTORA_FORK_SERVER=1`, docs/launcher.md "Rank start-up") and without:

- **ready s**: wall time from starting the launcher until the last rank's `ready` line arrives (the job could
  start its first step then);
- **CPU s**: CPU time of the whole job, launcher, fork server and every rank (`RUSAGE_CHILDREN` around the run:
  every process of the job is waited for), and **CPU s per rank** = that / ranks (the launcher's own share,
  about 1.5 s of imports and reports, weighs on the 1-rank row: it is what a job of one rank costs).

The machine is shared (2 cores): each configuration runs `--repeat` times and the run with the least CPU counts.
Writes data/simulator/rank_startup/<name>.json and meta.json; prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common.env import cpu_model, write_meta
from benchmarks.common.paths import REPO

PROGRAM = """\
import torch.distributed as dist
dist.init_process_group("nccl")
dist.barrier()
print("ready", flush=True)
dist.destroy_process_group()
"""


@dataclass(frozen=True)
class Run:
    ranks: int
    fork_server: bool
    ready_s: float
    """Wall time from the launcher's start until every rank printed `ready`."""
    exit_s: float
    cpu_s: float
    """CPU of the launcher and every process it started (user + system)."""

    @property
    def cpu_per_rank_s(self) -> float:
        return self.cpu_s / self.ranks


def topology(ranks: int) -> list[str]:
    return ["--nproc-per-node", str(ranks)] if ranks <= 8 else ["--nnodes", str(ranks // 8), "--nproc-per-node", "8"]


def run_once(ranks: int, fork_server: bool, program: Path, out: Path) -> Run:
    command = [sys.executable, "-m", "phantora.cli.main", "torchrun", "--gpu", "h200", "--ranks", "all", "--no-trace",
               "--out", str(out), *topology(ranks), str(program)]
    env = {**os.environ, "PHANTORA_FORK_SERVER": "1" if fork_server else "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=REPO)
    ready, ready_s = 0, float("nan")
    for line in proc.stdout:
        if line.rstrip().endswith(":ready"):
            ready += 1
            if ready == ranks:
                ready_s = time.monotonic() - started
    code = proc.wait()
    exit_s = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0 or ready != ranks:
        raise SystemExit(f"{ranks} ranks (fork server {'on' if fork_server else 'off'}): exit code {code}, "
                         f"{ready} of {ranks} ranks ready")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Run(ranks, fork_server, ready_s, exit_s, cpu)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="1,8,32", help="comma-separated rank counts (more than 8: nodes of 8)")
    p.add_argument("--fork-server", choices=("off", "on", "both"), default="both")
    p.add_argument("--repeat", type=int, default=1, help="runs of each configuration; the least CPU counts")
    p.add_argument("--name", default="rank_startup", help="data/simulator/rank_startup/<name>.json")
    args = p.parse_args()
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.fork_server]
    runs: list[Run] = []
    print(f"{'ranks':>5}  {'fork server':>11}  {'ready s':>8}  {'exit s':>7}  {'CPU s':>7}  {'CPU s per rank':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "startup_only.py"
        program.write_text(PROGRAM)
        for ranks in (int(n) for n in args.ranks.split(",")):
            for fork_server in modes:
                tries = [run_once(ranks, fork_server, program, Path(tmp) / "out") for _ in range(args.repeat)]
                run = min(tries, key=lambda r: r.cpu_s)
                runs.append(run)
                print(f"{ranks:>5}  {'on' if fork_server else 'off':>11}  {run.ready_s:>8.1f}  {run.exit_s:>7.1f}  "
                      f"{run.cpu_s:>7.1f}  {run.cpu_per_rank_s:>14.2f}", flush=True)
    out = REPO / "data" / "simulator" / "rank_startup"
    out.mkdir(parents=True, exist_ok=True)
    result = {"what": "wall time until every rank is ready and CPU per rank of a start-up-only program, "
                      "phantora torchrun --gpu h200 --ranks all",
              "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version()},
              "program": PROGRAM, "repeat": args.repeat,
              "runs": [{**asdict(r), "cpu_per_rank_s": r.cpu_per_rank_s} for r in runs]}
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    write_meta(out, __file__)
    print(f"wrote {out / (args.name + '.json')}")


if __name__ == "__main__":
    main()
