"""One job, several launchers (cli/multinode.py): two launchers on this machine meet over loopback, 2 nodes x 2
stand-in ranks (tests/support/stand_in_rank.py, the real transport), node 0 hosting the rendezvous and the
coordinator."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time

import pytest

SECRET = "test-secret-0123456789abcdef"
TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launcher(start_launcher, script, tmp_path, monkeypatch):
    """`launcher(out_name, JOB WORDS..., rank_args=())`: one launcher of a 2 x 2 job, with the shared secret,
    its output folder `tmp_path/out_name`."""
    monkeypatch.setenv("PHANTORA_SECRET", SECRET)

    def start(out_name: str, *words: str, rank_args: tuple[str, ...] = ()) -> subprocess.Popen:
        return start_launcher("torchrun", "--gpu", "h200", "--nnodes", "2", "--nproc-per-node", "2", *words,
                              "--out", str(tmp_path / out_name), script, *rank_args, monitor_interval_s=0.05)
    return start


def finish(*launchers: subprocess.Popen) -> list[tuple[int, str, str]]:
    """Each launcher's exit code, stdout and stderr."""
    outputs = [p.communicate(timeout=TIMEOUT_S) for p in launchers]
    return [(p.returncode, *output) for p, output in zip(launchers, outputs)]


def test_two_launchers_run_one_job_as_one_launcher_does(launcher, simulate, tmp_path):
    # c10d: node ranks are handed out (the endpoint's machine, the first to bind it, is node 0)
    job = ("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}")
    (code0, out0, err0), (code1, out1, err1) = finish(launcher("node0", *job), launcher("node1", *job))
    assert code0 == 0 and code1 == 0, err0 + err1
    hosting, other = (tmp_path / "node0", tmp_path / "node1")
    if not (hosting / "summary.json").exists():
        hosting, other, err0, err1, out0, out1 = other, hosting, err1, err0, out1, out0
    assert not (other / "summary.json").exists()
    summary = json.loads((hosting / "summary.json").read_text())
    assert summary["complete"] and summary["world_size"] == 4 and summary["ranks_reported"] == 4
    assert "note: a job of several launchers runs every rank" in err0
    assert f"phantora: the job finished; node 0 (127.0.0.1) wrote the reports to {hosting}/" in err1.splitlines()
    # each launcher shows its own node's ranks; the other node's result files reached node 0 over the store
    assert {line.split(":")[0] for line in out0.splitlines()} == {"[rank0]", "[rank1]"}
    assert {line.split(":")[0] for line in out1.splitlines()} == {"[rank2]", "[rank3]"}
    assert json.loads((hosting / "rank3" / "result.json").read_text())["rank"] == 3
    # the same simulated numbers as one launcher running every rank
    alone = simulate("torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--ranks", "all", out="alone")
    assert alone.code == 0 and alone.summary["per_rank"] == summary["per_rank"]
    assert alone.summary["simulated_time_s"] == summary["simulated_time_s"]


def test_a_rank_failing_on_node_1_stops_the_job_on_both(launcher, tmp_path):
    job = ("--master-addr", "127.0.0.1", "--master-port", str(free_port()))  # the static rendezvous
    fail = ("--fail-rank", "3")
    (code0, _, err0), (code1, out1, err1) = finish(launcher("node0", *job, "--node-rank", "0", rank_args=fail),
                                                   launcher("node1", *job, "--node-rank", "1", rank_args=fail))
    assert code0 == 1 and code1 == 1, err0 + err1
    report = err0[err0.index("train.py FAILED"):]
    assert "rank      : 3 (local_rank: 1)" in report and "exitcode  : 3" in report
    assert "RuntimeError: stand-in rank 3 fails on purpose" in report  # its stderr, sent by node 1's launcher
    assert err0.splitlines()[-1] == f"phantora: error: rank 3 exited with code 3; partial results are in {tmp_path / 'node0'}/"
    assert err1.splitlines()[-1] == (f"phantora: error: rank 3 exited with code 3; node 0 (127.0.0.1) wrote the "
                                     f"reports to {tmp_path / 'node0'}/")
    assert "[rank3]:RuntimeError: stand-in rank 3 fails on purpose" in err1


def test_launchers_with_different_secrets_never_meet(launcher, monkeypatch):
    job = ("--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-conf", "join_timeout=5")
    node0 = launcher("node0", *job, "--node-rank", "0")
    monkeypatch.setenv("PHANTORA_SECRET", "another-secret-0123456789")
    node1 = launcher("node1", *job, "--node-rank", "1")
    (code0, _, err0), (code1, _, err1) = finish(node0, node1)
    # a LaunchError out of launch() (the command line prints it as one line, exit code 2)
    assert code1 != 0 and "RendezvousError: the rendezvous at 127.0.0.1:" in err1.strip().splitlines()[-1]
    assert "not signed with this launcher's secret" in err1
    assert code0 == 1 and "node 1's launcher did not join the rendezvous" in err0.splitlines()[-1]


@pytest.mark.slow
def test_a_launcher_that_dies_stops_the_job_in_bounded_time(launcher):
    """Node 1's launcher is killed while node 0's rank 0 holds the job (it sleeps after connecting): its ranks end
    with it (docs/failures.md, "No process outlives the simulation"), so node 0 sees their connections close and
    stops the job, well within its peer timeout."""
    from phantora.cli.multinode import PEER_TIMEOUT_S

    job, hang = ("--rdzv-endpoint", f"127.0.0.1:{free_port()}"), ("--hang-rank", "0")
    node0 = launcher("node0", *job, "--node-rank", "0", rank_args=hang)
    node1 = launcher("node1", *job, "--node-rank", "1", rank_args=hang)
    started = set()
    while len(started) < 2:  # node 1's ranks print before they connect
        line = node1.stdout.readline()
        assert line, node1.stderr.read()
        started |= {rank for rank in ("[rank2]:", "[rank3]:") if line.startswith(rank)}
    time.sleep(3)  # they connect and wait for rank 0
    node1.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    (code0, _, err0), = finish(node0)
    assert code0 == 1 and time.monotonic() - killed < PEER_TIMEOUT_S + 30
    assert re.match(r"phantora: error: the simulation stopped: rank [23] disconnected before it finished", err0.splitlines()[-1]), err0
    node1.communicate(timeout=TIMEOUT_S)


TINY_PROGRAM = """
import torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank % torch.cuda.device_count())
x = torch.ones(1 << 20, device="cuda")
for _ in range(3):
    dist.all_reduce(x)
torch.cuda.synchronize()
print(f"rank {rank} of {dist.get_world_size()} on node {rank // 2}")
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_real_program_on_two_launchers(tmp_path, monkeypatch):
    """torch's own rendezvous across launchers: node 1's ranks reach rank 0's store at MASTER_ADDR."""
    import os
    import sys
    from pathlib import Path

    script = tmp_path / "tiny.py"
    script.write_text(TINY_PROGRAM)
    job = ["torchrun", "--gpu", "h200", "--nnodes", "2", "--nproc-per-node", "2", "--no-trace",
           "--rdzv-endpoint", f"localhost:{free_port()}"]
    env = {**os.environ, "PHANTORA_SECRET": SECRET}
    launchers = [subprocess.Popen([sys.executable, "-m", "phantora.cli.main", *job, "--node-rank", str(node), "--out",
                                   str(tmp_path / f"node{node}"), str(script)], cwd=Path(__file__).parents[2], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for node in (0, 1)]
    (code0, out0, err0), (code1, out1, err1) = finish(*launchers)
    assert code0 == 0 and code1 == 0, err0 + err1
    assert sorted(out0.splitlines() + out1.splitlines()) == [f"[rank{r}]:rank {r} of 4 on node {r // 2}" for r in range(4)]
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["complete"] and summary["ranks_reported"] == 4 and summary["nccl_calls"] >= 12
