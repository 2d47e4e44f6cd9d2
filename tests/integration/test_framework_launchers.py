"""Frameworks' own launchers, simulated end to end: `phantora deepspeed` and `phantora accelerate launch` run
real DeepSpeed and Accelerate programs (tiny models) as `deepspeed` and `accelerate launch` would start them."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, SCRIPTS, PhantoraRun

EXAMPLES = REPO / "examples" / "accelerate"


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def phantora(tmp_path, command: tuple[str, ...], *words: str) -> PhantoraRun:
    """`phantora COMMAND --gpu h200 --out OUT WORDS`, in a fresh folder."""
    out_dir = tmp_path / "out"
    argv = [sys.executable, "-m", "phantora.cli.main", *command, "--gpu", "h200", "--out", str(out_dir), *words]
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    return PhantoraRun(done.returncode, done.stdout, done.stderr, out_dir)


def tagged_lines(text: str, tag: str) -> list[dict]:
    """Every `TAG {json}` line, whatever prefix the launcher puts before it."""
    return [json.loads(line.split(f"{tag} ", 1)[1]) for line in text.splitlines() if f"{tag} {{" in line]


@pytest.mark.skipif(not installed("deepspeed"), reason="DeepSpeed is not installed (DS_BUILD_OPS=0 pip install "
                                                         "deepspeed==0.19.8)")
def test_deepspeed_launcher_runs_zero3_on_two_gpus(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True},
                                  "zero_optimization": {"stage": 3}}))
    run = phantora(tmp_path, ("deepspeed",), "--num_gpus", "2", str(SCRIPTS / "deepspeed_probe.py"),
                   "--deepspeed_config", str(config))
    assert run.code == 0, run.stderr[-3000:]
    reports = sorted(tagged_lines(run.stdout, "DS"), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    for rank, report in enumerate(reports):
        assert report["local_rank_argument"] == rank and report["device"] == f"cuda:{rank}"  # --local_rank=N
        assert report["env"] == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_SIZE": "2",
                                 "CROSS_RANK": "0", "CROSS_SIZE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
        assert report["zero_stage"] == 3 and report["bf16"] and report["world_size"] == 2
    assert run.stdout.count("step 2: ") == 2  # the program's own step times, simulated
    assert run.summary["complete"] and run.summary["world_size"] == 2 and run.summary["nccl_calls"] > 0


@pytest.mark.skipif(not (installed("accelerate") and installed("transformers")),
                    reason="Accelerate and Transformers are not installed (pip install accelerate==1.15.0 "
                           "transformers==5.24.0)")
def test_accelerate_launch_runs_fsdp2_from_its_config_file(tmp_path):
    run = phantora(tmp_path, ("accelerate", "launch"), "--config_file", str(EXAMPLES / "fsdp2.yaml"),
                   str(SCRIPTS / "accelerate_probe.py"))
    assert run.code == 0, run.stderr[-3000:]
    reports = sorted(tagged_lines(run.stdout, "ACC"), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:  # what the config file says reached Accelerator() through Accelerate's variables
        assert report["distributed_type"] == "DistributedType.FSDP" and report["fsdp_version"] == 2
        assert report["mixed_precision"] == "bf16" and report["num_processes"] == 2
        assert report["wrapped"].startswith("FSDP")  # fully_shard's class
    assert run.summary["complete"] and run.summary["world_size"] == 2 and run.summary["nccl_calls"] > 0
