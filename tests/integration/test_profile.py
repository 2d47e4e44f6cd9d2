"""`phantora profile` end to end on the CPU: a simulation records its op signatures, `phantora profile
--device cpu` measures them (wall time of CPU kernels: the pipeline, not the numbers), a later simulation
uses the database through --kernel-db; on-the-fly profiling measures once and reuses its cache."""

import subprocess
import sys

import pytest
import torch

from conftest import REPO, SCRIPTS
from phantora.models.compute import KernelDatabase
from phantora.models.opcall import decode_op, signature
from phantora.profiler.oplog import read_ops

SCRIPT = str(SCRIPTS / "profile_ops.py")


def profile(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "phantora.cli.main", "profile", *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO)


def test_recorded_ops_are_measured_into_a_database_that_a_later_run_uses(phantora, tmp_path):
    first = phantora(SCRIPT)
    assert first.code == 0, first.stderr
    recorded = read_ops(first.out_dir / "ops.jsonl")
    assert (first.out_dir / "rank0" / "ops.jsonl").is_file() and recorded.gpu == "h200"
    by_op = {r["op"]: r for r in recorded.records.values()}
    assert by_op["aten.mm.default"]["calls"] == 3 and by_op["aten.mm.default"]["source"] == "analytic"
    assert sum(r["calls"] for r in recorded.records.values()) == first.summary["kernels"]
    clone = decode_op(by_op["aten.clone.default"])  # x[:, 1:]: a view one element into its storage
    assert clone.args[0].storage_offset == 1 and clone.args[0].stride == (53, 1)

    db_path = tmp_path / "db.jsonl"
    done = profile(str(first.out_dir), "--out", str(db_path), "--device", "cpu", "--gpu", "h200",
                   "--warmup", "1", "--repeat", "3")
    assert done.returncode == 0, done.stderr
    assert f"measured {len(recorded.records)} op signatures" in done.stderr
    db = KernelDatabase.load(db_path)
    assert db.gpu == "h200" and db.meta["tool"] == "phantora profile"
    assert set(db.entries) == set(recorded.records)
    assert all(e.count == 3 and e.kernel_ns > 0 for e in db.entries.values())

    second = phantora(SCRIPT, extra=("--kernel-db", str(db_path)))
    assert second.code == 0, second.stderr
    assert second.summary["kernel_sources"] == {"measured": first.summary["kernels"]}
    gap = 1184  # calibration.json kernel_gap_ns, one kernel per CPU-timed op
    for sig, rec in read_ops(second.out_dir / "ops.jsonl").records.items():
        assert rec["source"] == "measured" and rec["est_ns"] == db.entries[sig].kernel_ns + gap
    assert signature(decode_op(by_op["aten.mm.default"])) in db.entries


def test_profile_command_errors_are_one_line(tmp_path):
    missing = profile(str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "db.jsonl"), "--device", "cpu",
                      "--gpu", "h200")
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "no such ops file" in missing.stderr
    no_out = profile(str(tmp_path))
    assert no_out.returncode == 2 and "--out" in no_out.stderr


def test_on_the_fly_profiling_measures_once_and_reuses_its_cache(phantora, tmp_path):
    cache = tmp_path / "cache"
    extra = ("--profile-on-the-fly", "--profile-device", "cpu", "--profile-cache", str(cache))
    first = phantora(SCRIPT, extra=extra)
    assert first.code == 0, first.stderr
    assert first.summary["kernel_sources"] == {"measured": first.summary["kernels"]}
    cached = KernelDatabase.load(cache / "h200.jsonl")
    assert cached.meta["tool"] == "phantora on-the-fly" and len(cached) == len(read_ops(first.out_dir / "ops.jsonl").records)
    before = (cache / "h200.jsonl").read_bytes()
    second = phantora(SCRIPT, extra=extra)
    assert second.code == 0, second.stderr
    assert second.stdout == first.stdout  # ELAPSED: the same simulated time, from the cached measurements
    assert (cache / "h200.jsonl").read_bytes() == before  # nothing measured again


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_on_the_fly_without_a_gpu_is_a_one_line_error(phantora, tmp_path):
    run = phantora(SCRIPT, extra=("--profile-on-the-fly", "--profile-cache", str(tmp_path)))
    assert run.code == 2
    assert run.stderr.strip().count("\n") == 0 and "no CUDA GPU is available" in run.stderr


def test_profile_script_simulates_then_measures(tmp_path):
    db_path = tmp_path / "db.jsonl"
    done = profile("--out", str(db_path), "--device", "cpu", "--gpu", "h200", "--warmup", "0", "--repeat", "1",
                   "--script", SCRIPT)
    assert done.returncode == 0, done.stderr
    recorded = read_ops(tmp_path / "db-sim" / "ops.jsonl")
    assert set(KernelDatabase.load(db_path).entries) == set(recorded.records)
    assert "ELAPSED" in done.stdout  # the script ran, under the simulator
