"""Fault injection (docs/failures.md): every way a simulation can go wrong ends in bounded time, non-zero, with
the failing rank's own words in the report, partial results written and no process left behind.

Ranks are stand-ins (tests/support/stand_in_rank.py: the real protocol through RankClient, no torch), so each
case takes seconds; each starts processes that would outlive their rank (`--leave-children MARKER`: one in the
rank's group, one after setsid, one orphaned by a double fork) and counts them before and after."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import SCRIPTS
from process_tree import alive, descendants
from phantora.cli.processes import end_leftovers, own_start_ticks, process_table, set_child_subreaper


def processes_with(marker: str) -> list[str]:
    """Live processes a rank left with `marker` as their last argument (zombies have no command line)."""
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if line.split()[-1] == marker and "--leave-children" not in line]


def settled_count(marker: str, expected: int, *, timeout_s: float, settle_s: float = 2.0) -> int:
    """How many processes carry `marker` once the count has stayed at `expected` for `settle_s` (or at the
    deadline): while two ranks start their children, a double fork's middle comes and goes, so one rank's
    count can pass `expected` on the way while the other's is still short."""
    deadline, since = time.monotonic() + timeout_s, None
    while True:
        count, now = len(processes_with(marker)), time.monotonic()
        since = (since or now) if count == expected else None
        if (since is not None and now - since >= settle_s) or now >= deadline:
            return count
        time.sleep(0.1)


@pytest.fixture
def marker(tmp_path):
    name = f"phantora-fault-test-{os.getpid()}-{tmp_path.name}"
    assert not processes_with(name)
    yield name
    for line in processes_with(name):  # never leave them to the next test, even when this one failed
        subprocess.run(["kill", "-9", line.split()[0]])


def assert_nothing_left(marker: str) -> None:
    left = processes_with(marker)
    assert not left, f"processes outlived the simulation: {left}"


def root_cause(err: str) -> str:
    return err[err.index("Root Cause (first observed failure):"):]


def test_a_normal_end_leaves_no_process(simulate, marker):
    run = simulate("torchrun", "--nproc-per-node", "2", args=("--leave-children", marker))
    assert run.code == 0, run.err
    assert "[rank1]:rank 1 started its children" in run.out
    assert_nothing_left(marker)
    assert "phantora: ended 6 process(es) the ranks left running" in run.err


def test_a_rank_that_raises_mid_collective(simulate, marker):
    run = simulate("torchrun", "--nproc-per-node", "3", args=("--fail-rank", "1", "--leave-children", marker))
    assert run.code == 1
    root = root_cause(run.err)
    assert "rank      : 1 (local_rank: 1)" in root and "RuntimeError: stand-in rank 1 fails on purpose" in root
    assert "..." not in root
    assert not run.summary["complete"] and (run.out_dir / "trace.json").exists()
    assert_nothing_left(marker)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_rank_killed_mid_step(simulate, marker, sig):
    started = time.monotonic()
    run = simulate("torchrun", "--nproc-per-node", "3",
                   args=("--kill-self-rank", "2", "--kill-signal", sig.name, "--leave-children", marker))
    assert run.code == 1 and time.monotonic() - started < 30
    root = root_cause(run.err)
    assert "rank      : 2 (local_rank: 2)" in root and f"Signal {sig.value} ({sig.name}) received by PID" in root
    if sig == signal.SIGSEGV:  # faulthandler's stack of the crash
        assert "Fatal Python error: Segmentation fault" in root and "in main" in root, root
    last = run.err.strip().splitlines()[-1]
    assert last.startswith(f"phantora: error: rank 2 was killed by signal {sig.value} ({sig.name})")
    summary = run.summary
    assert not summary["complete"] and summary["simulated_time_s"] > 0  # what was placed before the failure
    assert (run.out_dir / "trace.json").stat().st_size > 0
    killed = next(r for r in summary["per_rank"] if r["rank"] == 2)  # as the rank last told the coordinator
    assert killed["reported"] and killed["peak_allocated_gib"] == 3.0 and killed["peak_reserved_gib"] == 4.0
    assert_nothing_left(marker)


def test_a_rank_that_loops_forever_while_its_peers_wait(simulate, marker):
    """The hang watchdog: after `hang_timeout_s` of silence from a rank while a peer waits, the report names the
    rank and shows where its Python is (faulthandler)."""
    started = time.monotonic()
    run = simulate("torchrun", "--nproc-per-node", "3", args=("--spin-rank", "1", "--leave-children", marker),
                   hang_timeout_s=2.0)
    assert run.code == 1 and time.monotonic() - started < 30
    root = root_cause(run.err)
    assert "rank      : 1 (local_rank: 1)" in root and "the watchdog aborted it" in root
    assert "in spin_forever" in root, run.err  # its Python stack
    last = run.err.strip().splitlines()[-1]
    assert last.startswith("phantora: error: rank 1 made no progress for 2 s (wall clock) while rank 0, 2 waited")
    assert not run.summary["complete"] and (run.out_dir / "trace.json").exists()
    assert_nothing_left(marker)


def test_the_programs_process_group_timeout_bounds_a_hang(simulate, marker):
    """No --hang-timeout: the watchdog waits as long as NCCL's would, the timeout of the group the peers wait in
    (`init_process_group(timeout=...)`), and says what NCCL's watchdog says on each waiting rank."""
    started = time.monotonic()
    run = simulate("torchrun", "--nproc-per-node", "2",
                   args=("--spin-rank", "1", "--pg-timeout", "1.5", "--leave-children", marker), hang_timeout_s=None)
    assert run.code == 1 and time.monotonic() - started < 30
    root = root_cause(run.err)
    assert "rank      : 1 (local_rank: 1)" in root and "in spin_forever" in root
    assert re.search(r"rank 0: \[Rank 0\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=1, "
                     r"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout\(ms\)=1500\) ran for 1[5-9]\d\d "
                     r"milliseconds before timing out\.", root), root
    assert "[rank0]:[Rank 0] Watchdog caught collective operation timeout" in run.err
    assert run.err.strip().splitlines()[-1].startswith("phantora: error: rank 1 made no progress for 1.5 s")
    assert_nothing_left(marker)


def test_a_rank_that_hangs_before_it_connects(simulate, marker):
    started = time.monotonic()
    run = simulate("torchrun", "--nproc-per-node", "3",
                   args=("--spin-before-connect-rank", "1", "--leave-children", marker), hang_timeout_s=2.0)
    assert run.code == 1 and time.monotonic() - started < 30
    root = root_cause(run.err)
    assert "rank      : 1 (local_rank: 1)" in root and "hung before it connected" in root
    assert "in spin_forever" in root, root
    last = run.err.strip().splitlines()[-1]
    assert last.startswith("phantora: error: rank 1 did not connect to the coordinator within 2 s"), last
    assert_nothing_left(marker)


def test_a_deadlock_names_each_ranks_pending_call(simulate, marker):
    run = simulate("torchrun", "--nproc-per-node", "2", args=("--mismatch-rank", "1", "--leave-children", marker))
    assert run.code == 1
    root = root_cause(run.err)
    assert "rank      : coordinator" in root and "does not match" in root
    assert "all_reduce" in root and "rank 0" in root and "rank 1" in root
    assert_nothing_left(marker)


def test_a_dropped_coordinator_connection(simulate, marker):
    started = time.monotonic()
    run = simulate("torchrun", "--nproc-per-node", "2",
                   args=("--drop-connection-rank", "0", "--leave-children", marker))
    assert run.code == 1 and time.monotonic() - started < 30
    root = root_cause(run.err)
    assert "rank      : 0 (local_rank: 0)" in root and "rank 0 disconnected before it finished" in root
    assert (run.out_dir / "summary.json").exists()
    assert_nothing_left(marker)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_launcher_interrupted(tmp_path, script, start_launcher, marker, sig, code):
    out_dir = tmp_path / "out"
    launcher = start_launcher("torchrun", "--gpu", "h200", "--out", str(out_dir), "--nproc-per-node", "2", script,
                              "--hang-rank", "0", "--leave-children", marker)
    try:
        assert settled_count(marker, 6, timeout_s=60) == 6
        launcher.send_signal(sig)
        _, err = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:  # the test failed: still stop the launcher the way that cleans up
            launcher.terminate()
            launcher.communicate(timeout=30)
    assert launcher.returncode == code, err
    assert (out_dir / "summary.json").exists()
    assert_nothing_left(marker)


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's /proc")
def test_the_launcher_killed_leaves_nothing(tmp_path, script, start_launcher, marker):
    """kill -9 of the launcher: its ranks, their children (in the rank's group, after setsid, orphaned) end within
    seconds (cli/processes.py Note [When the launcher itself is killed])."""
    launcher = start_launcher("torchrun", "--gpu", "h200", "--out", str(tmp_path / "out"), "--nproc-per-node", "2",
                              script, "--hang-rank", "0", "--leave-children", marker)
    try:
        assert settled_count(marker, 6, timeout_s=60) == 6
        job = descendants(launcher.pid)
        assert len(job) >= 2 + 6, job  # the ranks and their children (and the guardian)
        launcher.kill()
        launcher.communicate(timeout=30)
        deadline = time.monotonic() + 15
        while (left := alive(job)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"processes outlived the killed launcher: {left}"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate(timeout=30)
    assert_nothing_left(marker)


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's PR_SET_CHILD_SUBREAPER")
def test_orphans_of_a_child_are_adopted_and_ended():
    """A child that double-forks after setsid: its grandchild comes back to this process, and is ended."""
    since = own_start_ticks()
    was = set_child_subreaper(True)
    try:
        rank = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); os.fork() and os._exit(0); "
                                 "time.sleep(60)"])
        rank.wait()
        deadline = time.monotonic() + 10
        while not (orphans := _children(since, exclude=rank.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphans, "the grandchild was not adopted"
        assert set(end_leftovers([rank.pid], since)) == orphans
        assert not _children(since, exclude=rank.pid)
    finally:
        set_child_subreaper(bool(was))


def _children(since: int, exclude: int) -> set[int]:
    return {p.pid for p in process_table().values()
            if p.ppid == os.getpid() and p.start_ticks >= since and p.pid != exclude and not p.zombie}


def processes_running(script: str) -> list[str]:
    """Live processes whose command line names `script` (ranks and their forked DataLoader workers)."""
    found = subprocess.run(["pgrep", "-af", script], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if "pgrep" not in line and "phantora.cli.main" not in line]


@pytest.mark.slow
def test_a_pytorch_rank_that_raises_mid_collective(torchrun):
    """Real ranks with DataLoader workers: the report shows the rank's own exception, its peak memory is in the
    summary, and neither ranks nor workers are left."""
    script = str(SCRIPTS / "faulty_train.py")
    run = torchrun(2, script, "--raise-rank", "1", timeout=300)
    assert run.code == 1, run.stderr
    root = root_cause(run.stderr)
    assert "rank      : 1 (local_rank: 1)" in root and "ValueError: rank 1 fails on purpose at step 1" in root
    assert 'faulty_train.py", line' in root  # the traceback's frames, not an ellipsis
    failed = next(r for r in run.summary["per_rank"] if r["rank"] == 1)
    assert failed["reported"] and failed["peak_allocated_gib"] > 0
    assert (run.out_dir / "trace.json").stat().st_size > 0
    assert not processes_running(script)
    # nothing that does not concern the program: no NCCL timeout warning per group, no compile warning
    assert "NCCL support is not compiled" not in run.stderr and "torch.compile" not in run.stderr


@pytest.mark.slow
def test_a_pytorch_rank_that_hangs_in_python(torchrun):
    """The program's own process-group timeout bounds the hang, and the report says what NCCL's watchdog says."""
    script = str(SCRIPTS / "faulty_train.py")
    run = torchrun(2, script, "--spin-rank", "0", "--pg-timeout", "5", timeout=300)
    assert run.code == 1, run.stderr
    root = root_cause(run.stderr)
    assert "rank      : 0 (local_rank: 0)" in root and "the watchdog aborted it" in root
    assert re.search(r"rank 1: \[Rank 1\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+, "
                     r"OpType=ALLREDUCE, NumelIn=\d+, NumelOut=\d+, Timeout\(ms\)=5000\) ran for \d+ milliseconds "
                     r"before timing out\.", root), root
    assert re.search(r'faulty_train.py", line (32|33) in <module>', root), root  # where it spins: the loop
    assert not processes_running(script)
