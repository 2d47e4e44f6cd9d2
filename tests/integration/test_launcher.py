"""The launcher with stand-in rank processes (tests/support/stand_in_rank.py speaks the real protocol
through RankClient): environment, prefixed output, failures, signals, reports, determinism."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stand_in_rank import STAND_IN
from phantora.transport.delay import DELAY_ENV_VAR

def tagged(text: str, tag: str) -> dict[str, dict]:
    return {line.split(":", 1)[0]: json.loads(line.split(tag + " ", 1)[1])
            for line in text.splitlines() if f":{tag} " in line}


def test_job_environment_output_and_reports(simulate, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    run = simulate("torchrun", "--ranks", "all", "--nnodes", "2", "--nproc-per-node", "2", args=("--env-dump",))
    assert run.code == 0, run.err
    envs = tagged(run.out, "ENV")
    assert sorted(envs) == ["[rank0]", "[rank1]", "[rank2]", "[rank3]"]
    ports = {e["MASTER_PORT"] for e in envs.values()}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for rank in range(4):
        env = envs[f"[rank{rank}]"]
        assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"]) == (str(rank), str(rank % 2), str(rank // 2))
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("4", "2", "2")
        assert (env["ROLE_RANK"], env["ROLE_WORLD_SIZE"], env["ROLE_NAME"]) == (str(rank), "4", "default")
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0" and env["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert env["OMP_NUM_THREADS"] == "1" and env["TORCHELASTIC_ERROR_FILE"].endswith(f"rank{rank}/error.json")
        assert env["error_file_folder_exists"]  # torch's @record can write the program's traceback there
        rank_config = json.loads(env["PHANTORA_RUN_CONFIG"])
        assert (rank_config["rank"], rank_config["world_size"]) == (rank, 4)
        assert rank_config["coordinator"].startswith("127.0.0.1:") and rank_config["devices_per_process"] == 2
    # every line whole and prefixed, on the right stream
    assert all(line.startswith("[rank") for line in run.out.splitlines())
    assert "[rank3]:hello 1 from rank 3 of 4" in run.out.splitlines()
    assert "[rank2]:rank 2 stderr line" in run.err.splitlines()
    summary = run.summary
    assert summary["complete"] and summary["exit_code"] == 0 and summary["world_size"] == 4
    assert summary["ranks_reported"] == 4 and summary["nccl_calls"] > 0 and summary["kernels"] > 0
    assert 0 < summary["gpu_busy_fraction"] <= 1 and summary["peak_allocated_gib"] == 4.0
    assert summary["placeholder_reads"] == {".item()": 4} and summary["host_only_ops"] == 20
    assert summary["simulator_records"] >= summary["kernels"] + summary["nccl_calls"]
    assert [r["rank"] for r in summary["per_rank"]] == [0, 1, 2, 3]
    assert "== Phantora summary" in run.err and "exposed ms" in run.err
    for name in ("trace.json", "report.png", "timeline.png"):
        assert (run.out_dir / name).stat().st_size > 0
    events = json.loads((run.out_dir / "trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1, 2, 3} and all(e["ph"] in ("X", "M") for e in events)


def test_run_is_one_rank_without_torchrun_variables(simulate, monkeypatch, capfd):
    monkeypatch.delenv("RANK", raising=False)
    run = simulate("run", args=("--env-dump",))
    assert run.code == 0, run.err
    printed = capfd.readouterr()  # the rank writes straight to the launcher's stdout and stderr
    assert "rank 0 stderr line" in printed.err.splitlines()
    line = next(line for line in printed.out.splitlines() if line.startswith("ENV "))  # not prefixed
    env = json.loads(line[4:])
    assert env["RANK"] is None and env["MASTER_PORT"] is None
    assert json.loads(env["PHANTORA_RUN_CONFIG"])["coordinator"].startswith("127.0.0.1:")
    assert run.summary["complete"] and run.summary["world_size"] == 1


def test_deepspeed_workers_get_its_launchers_variables_and_local_rank(simulate, script, monkeypatch):
    pytest.importorskip("deepspeed.launcher.runner")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    run = simulate("deepspeed", "--num_gpus", "2", args=("--env-dump",))
    assert run.code == 0, run.err
    envs = {int(env["RANK"]): env for env in (json.loads(line[4:]) for line in run.out.splitlines()
                                              if line.startswith("ENV "))}  # whole lines, not prefixed
    assert sorted(envs) == [0, 1]
    for rank, env in envs.items():
        assert env["argv"] == [script, f"--local_rank={rank}", "--env-dump"]  # after the script, as launch.py
        assert (env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_SIZE"]) == (str(rank), "2", "2")
        assert (env["CROSS_RANK"], env["CROSS_SIZE"], env["CUDA_VISIBLE_DEVICES"]) == ("0", "1", "0,1")
        assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
        assert env["TORCHELASTIC_RUN_ID"] is None and env["GROUP_RANK"] is None  # not torchrun's
    assert run.summary["complete"] and run.summary["world_size"] == 2


def test_a_failing_deepspeed_rank_gives_its_own_exit_code(simulate):
    pytest.importorskip("deepspeed.launcher.runner")
    run = simulate("deepspeed", "--num_gpus", "2", args=("--fail-rank", "1", "--exit-code", "3"))
    assert run.code == 3  # deepspeed exits with the failed worker's code; torchrun would exit 1
    assert "train.py FAILED" in run.err and "stand-in rank 1 fails on purpose" in run.err


def test_a_failing_rank_stops_the_others_and_is_reported(simulate):
    run = simulate("torchrun", "--nproc-per-node", "3", args=("--fail-rank", "1", "--exit-code", "3"))
    assert run.code == 1
    report = run.err[run.err.index("train.py FAILED"):]
    root = report[report.index("Root Cause (first observed failure):"):]
    assert "rank      : 1 (local_rank: 1)" in root and "exitcode  : 3 (pid: " in root
    assert "Traceback (most recent call last):" in root and "RuntimeError: stand-in rank 1 fails on purpose" in root
    assert "<NO_OTHER_FAILURES>" in report  # the others were stopped, not failing on their own
    assert run.err.strip().splitlines()[-1] == \
        f"phantora: error: rank 1 exited with code 3; partial results are in {run.out_dir}/"
    summary = run.summary  # partial results are summarised
    assert not summary["complete"] and summary["exit_code"] == 1 and summary["ranks_reported"] == 1
    assert summary["error"] == "rank 1 exited with code 3"


def test_a_coordinator_error_is_the_root_cause(simulate):
    run = simulate("torchrun", "--nproc-per-node", "2", args=("--mismatch-rank", "1"))
    assert run.code == 1
    root = run.err[run.err.index("Root Cause"):]
    assert "rank      : coordinator" in root and "does not match" in root
    last = run.err.strip().splitlines()[-1]  # the second rank to issue the all_reduce sees the mismatch
    assert last.startswith("phantora: error: the simulation stopped: rank ") and "does not match" in last
    assert not run.summary["complete"]


def test_a_rank_that_fails_after_finishing_is_the_cause_of_the_deadlock_it_leaves(simulate):
    run = simulate("torchrun", "--nproc-per-node", "2", args=("--finish-then-fail-rank", "1"))
    assert run.code == 1
    root = run.err[run.err.index("Root Cause"):]
    assert "rank      : 1 (local_rank: 1)" in root and "exitcode  : 4" in root
    assert "peers were left waiting" in root and "ValueError: failed after finishing" in root


def test_a_rank_that_never_connects_is_a_failure(simulate):
    run = simulate("torchrun", "--nproc-per-node", "2", args=("--no-connect-rank", "1"))
    assert run.code == 1
    assert "rank 1 exited without connecting to the coordinator" in run.err
    assert "rank      : 1 (local_rank: 1)" in run.err and "exitcode  : 0" in run.err


def test_filters_redirects_tee_and_progress(simulate, tmp_path):
    logs = tmp_path / "logs"
    run = simulate("torchrun", "--nproc-per-node", "3", "--local-ranks-filter", "0,1", "-r", "1:3", "-t", "0:1",
                   "--log-dir", str(logs), "--progress", args=("--rounds", "40"), progress_interval_s=0.01)
    assert run.code == 0, run.err
    assert "phantora: simulated " in run.err and " records/s | " in run.err
    assert {line.split(":", 1)[0] for line in run.out.splitlines()} == {"[rank0]"}  # 1 redirected, 2 filtered
    assert "[rank1]" not in run.err and "[rank2]" not in run.err and "[rank0]:rank 0 stderr line" in run.err
    assert (logs / "attempt_0" / "0" / "stdout.log").read_text().startswith("hello 0 from rank 0")
    assert not (logs / "attempt_0" / "0" / "stderr.log").exists()
    assert "rank 1 stderr line" in (logs / "attempt_0" / "1" / "stderr.log").read_text()
    assert not (logs / "attempt_0" / "2").exists()


def test_results_are_identical_under_random_scheduling(simulate, monkeypatch):
    monkeypatch.setenv(DELAY_ENV_VAR, "3")
    runs = [simulate("torchrun", "--nproc-per-node", "4", args=("--rounds", "15"), out=f"out{i}") for i in range(2)]
    assert all(r.code == 0 for r in runs), runs[0].err
    traces = [(r.out_dir / "trace.json").read_text() for r in runs]
    assert traces[0] == traces[1]
    keep = ("simulated_time_s", "gpu_busy_fraction", "nccl_s", "exposed_comm_s", "host_blocked_s", "per_rank")
    assert [{k: r.summary[k] for k in keep} for r in runs][0] == {k: runs[1].summary[k] for k in keep}


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_everything(tmp_path, script, start_launcher, sig, code):
    out_dir = tmp_path / "out"
    launcher = start_launcher("torchrun", "--gpu", "h200", "--out", str(out_dir), "--nproc-per-node", "2", script,
                              "--hang-rank", "0")
    deadline = time.monotonic() + 30
    seen = ""
    while "[rank0]:hello 1" not in seen and time.monotonic() < deadline:
        seen += launcher.stdout.readline()
    time.sleep(0.3)  # rank 0 hangs; rank 1 waits for it in the coordinator
    launcher.send_signal(sig)
    _, err = launcher.communicate(timeout=30)
    assert launcher.returncode == code, err
    assert err.strip().splitlines()[-1].startswith(f"phantora: error: interrupted ({signal.Signals(sig).name})")
    assert not json.loads((out_dir / "summary.json").read_text())["complete"]
    ps = subprocess.run(["pgrep", "-af", str(STAND_IN)], capture_output=True, text=True)
    assert script not in ps.stdout  # no rank left behind


def test_a_reader_that_goes_away_stops_everything_quietly(tmp_path, script, start_launcher):
    """`phantora torchrun ... | head -3`: the launcher stops the ranks and ends as a program that gets SIGPIPE, with
    no traceback."""
    out_dir = tmp_path / "out"
    launcher = start_launcher("torchrun", "--gpu", "h200", "--out", str(out_dir), "--nproc-per-node", "2", script,
                              "--lines", "200000")
    launcher.stdout.readline()
    launcher.stdout.close()  # the reader goes away
    err = launcher.stderr.read()
    assert launcher.wait(timeout=60) == 128 + signal.SIGPIPE, err
    assert "Traceback" not in err and "Exception ignored" not in err
    assert err.strip().splitlines()[-1].startswith("phantora: error: the output's reader went away (SIGPIPE)")
    assert (out_dir / "summary.json").exists()
    ps = subprocess.run(["pgrep", "-af", str(STAND_IN)], capture_output=True, text=True)
    assert script not in ps.stdout  # no rank left behind
