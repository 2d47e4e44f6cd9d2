"""The fork server (cli/fork_server.py, runtime/zygote.py): a rank forked from it observes what a rank started by
exec observes, and a killed launcher takes forked ranks and their DataLoader workers with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, SCRIPTS, rank_json
from process_tree import alive, descendants

pytestmark = pytest.mark.slow

RANDOM = ("random", "numpy", "authkey")
"""Values every process draws afresh: they differ between ranks, however the ranks started."""


def probes(torchrun, fork_server: str) -> dict[int, dict]:
    run = torchrun(2, str(SCRIPTS / "process_probe.py"), "a", "--b", env={"PHANTORA_FORK_SERVER": fork_server},
                   timeout=300)
    assert run.code == 0, run.stderr
    return rank_json(run, "PROBE")


def test_a_forked_rank_observes_what_an_execd_rank_observes(torchrun):
    forked, execd = probes(torchrun, "1"), probes(torchrun, "0")
    assert all(p["forked"] for p in forked.values()) and not any(p["forked"] for p in execd.values())
    for rank in (0, 1):
        same = {k: v for k, v in forked[rank].items() if k not in (*RANDOM, "forked")}
        assert same == {k: v for k, v in execd[rank].items() if k not in (*RANDOM, "forked")}
        assert same["argv"] == [str(SCRIPTS / "process_probe.py"), "a", "--b"] and same["name"] == "__main__"
        assert same["own_group"] and same["parent_is_launcher"] and same["torch_threads"] == 1  # OMP_NUM_THREADS=1
        assert same["simulated_clock"]  # the program's time.monotonic() is the simulated clock
        assert same["runtime_frozen"]  # runtime/bootstrap.py Note [The collector and the runtime's objects]
    for key in RANDOM:
        assert forked[0][key] != forked[1][key], key


def test_a_killed_launcher_takes_forked_ranks_and_their_workers_with_it(tmp_path):
    """kill -9 of the launcher while rank 0 spins and rank 1 waits, both with DataLoader workers: the ranks die with
    it (PR_SET_PDEATHSIG), the fork server too, the workers with their ranks or by the guardian."""
    launcher = subprocess.Popen([sys.executable, "-m", "phantora.cli.main", "torchrun", "--gpu", "h200", "--out",
                                 str(tmp_path / "out"), "--nproc-per-node", "2", str(SCRIPTS / "faulty_train.py"),
                                 "--spin-rank", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
                                env={**os.environ, "PHANTORA_FORK_SERVER": "1"})
    job: set[int] = set()
    try:
        for line in launcher.stdout:
            if line.startswith("[rank1]:step 0"):
                break
        job = descendants(launcher.pid)
        assert len(job) >= 2 + 4, job  # the ranks and their DataLoader workers (and the helpers)
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 15
        while alive(job) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(job), alive(job)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid in alive(job):
            os.kill(pid, 9)
