"""`phantora accelerate launch`: Accelerate's own code reads the options and config file, and the job is
what its launcher would start, with the variables Accelerate computed (no rank runs here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

launch_module = pytest.importorskip("accelerate.commands.launch")

from phantora.cli.launch import DeepSpeedEnv, TorchrunEnv, rank_environment  # noqa: E402
from phantora.cli.main import config_from_args, main, parse_command_line  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[3] / "examples" / "accelerate"


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # no `accelerate config` default of this machine's; tests that want one write it here
    from accelerate.commands.config import config_args
    for module in (launch_module, config_args):
        monkeypatch.setattr(module, "default_config_file", str(tmp_path / "default_config.yaml"))
    for name in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


def configure(*words: str, gpu: str = "h200"):
    return config_from_args(parse_command_line(["accelerate", "launch", "--gpu", gpu, *words]))


def worker_env(config, rank: int) -> dict[str, str]:
    env = rank_environment(config, rank, rank % config.nproc_per_node, rank_config=config.rank_config,
                           token="t", master_port=29611, base={})
    return {k: v for k, v in env.items() if k != "PHANTORA_RUN_CONFIG"}


def test_without_a_config_every_gpu_of_the_node(script):
    config, notes = configure("--out", "o", script, "--lr", "1")
    assert config.world_size == 8 and isinstance(config.workers, TorchrunEnv) and notes == []
    assert config.program.argv() == [script, "--lr", "1"] and config.rank_config.out_dir == "o"
    env = worker_env(config, 3)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("3", "3", "8")  # torchrun's workers
    assert env["ACCELERATE_MIXED_PRECISION"] == "no" and env["ACCELERATE_DYNAMO_BACKEND"] == "NO"
    config, _ = configure("--num_processes", "1", "--mixed_precision", "bf16", script)
    assert config.world_size == 1 and config.workers is None and config.output.prefix_template is None  # `run`
    env = worker_env(config, 0)
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["ACCELERATE_USE_CPU"] == "False"
    assert "RANK" not in env and "MASTER_PORT" not in env


def test_program_forms(script):
    config, _ = configure("--num_processes", "1", "-m", "pkg.train", "--x")
    assert config.program.argv() == ["-m", "pkg.train", "--x"]
    config, _ = configure("--num_processes", "2", "--no_python", sys.executable, script, "--x")
    assert config.program.argv() == [script, "--x"] and config.world_size == 2


def test_a_cluster_file_node(script, tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "b200"\nnodes = 2\ngpus_per_node = 4\n[nic]\nnics_per_node = 4\n')
    config, _ = config_from_args(parse_command_line(["accelerate", "launch", "--cluster", str(cluster), script]))
    assert config.world_size == 4 and config.rank_config.gpu == "b200"


def test_single_gpu_and_ddp_configs(script):
    config, _ = configure("--config_file", str(CONFIGS / "single_gpu.yaml"), script)
    assert config.world_size == 1 and config.workers is None
    assert worker_env(config, 0)["ACCELERATE_MIXED_PRECISION"] == "bf16"
    config, _ = configure("--config_file", str(CONFIGS / "ddp.yaml"), script)
    assert (config.world_size, config.nnodes) == (2, 1) and isinstance(config.workers, TorchrunEnv)
    assert worker_env(config, 1)["ACCELERATE_MIXED_PRECISION"] == "bf16" and worker_env(config, 1)["RANK"] == "1"
    config, _ = configure("--config_file", str(CONFIGS / "ddp.yaml"), "--mixed_precision", "fp16",
                          "--num_processes", "4", script)  # the command line wins over the file, as in Accelerate
    assert config.world_size == 4 and worker_env(config, 0)["ACCELERATE_MIXED_PRECISION"] == "fp16"


@pytest.mark.parametrize("name, version", [("fsdp1.yaml", "1"), ("fsdp2.yaml", "2")])
def test_fsdp_configs(script, name, version):
    config, _ = configure("--config_file", str(CONFIGS / name), script)
    env = worker_env(config, 1)
    assert config.world_size == 2 and env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == version
    assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP" and env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert env["FSDP_RESHARD_AFTER_FORWARD"] == "true" and env["WORLD_SIZE"] == "2"


def test_deepspeed_plugin_config(script):
    pytest.importorskip("deepspeed")
    config, _ = configure("--config_file", str(CONFIGS / "deepspeed_zero2.yaml"), "--zero_stage", "3", script)
    env = worker_env(config, 1)
    assert isinstance(config.workers, TorchrunEnv) and config.world_size == 2
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true" and env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert {"zero_stage", "mixed_precision"} <= set(env["ACCELERATE_CONFIG_DS_FIELDS"].split(","))
    assert env["PYTHONPATH"].split(":")[0] == os.getcwd()


def test_the_default_config_file(script, tmp_path):
    (tmp_path / "default_config.yaml").write_text((CONFIGS / "fsdp2.yaml").read_text())
    config, _ = configure(script)
    assert config.world_size == 2 and worker_env(config, 0)["FSDP_VERSION"] == "2"


def test_several_machines(script):
    config, notes = configure("--config_file", str(CONFIGS / "ddp.yaml"), "--num_machines", "2",
                              "--num_processes", "16", "--main_process_ip", "10.0.0.1", script)
    assert (config.nnodes, config.nproc_per_node, config.cluster.nodes) == (2, 8, 2)
    assert notes == ["every machine is simulated on this machine (MASTER_ADDR=127.0.0.1); not used: "
                     "--main_process_ip 10.0.0.1"]
    assert worker_env(config, 9)["GROUP_RANK"] == "1" and worker_env(config, 9)["MASTER_ADDR"] == "127.0.0.1"


def test_deepspeed_multi_node_launcher_runs_deepspeeds_command(script, tmp_path):
    pytest.importorskip("deepspeed")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node0 slots=8\nnode1 slots=8\n")
    config, _ = configure("--config_file", str(CONFIGS / "deepspeed_zero2.yaml"), "--num_machines", "2",
                          "--num_processes", "4", "--deepspeed_hostfile", str(hostfile),
                          "--deepspeed_multinode_launcher", "pdsh", script, "--x")
    assert isinstance(config.workers, DeepSpeedEnv) and (config.nnodes, config.nproc_per_node) == (2, 2)
    assert config.program.argv(1) == [script, "--x"]  # Accelerate passes --no_local_rank
    env = worker_env(config, 3)
    assert env["CROSS_RANK"] == "1" and env["ACCELERATE_USE_DEEPSPEED"] == "true"


@pytest.mark.parametrize("words, message", [
    (["--cpu"], "--cpu (use_cpu in the config file) trains on the CPU"),
    (["--frobnicate"], "accelerate launch: unrecognized arguments: --frobnicate"),
    (["--num_processes", "2", "--strict"], "(Phantora's options come before the accelerate launch options)"),
    (["--config_file", "missing.yaml"], "The passed configuration file `missing.yaml` does not exist"),
    (["--multi_gpu", "--num_processes", "1"], "You need to use at least 2 processes to use `--multi_gpu`"),
    (["--num_processes", "1", "--mixed_precision", "fp4"], "--mixed_precision/--mixed-precision: invalid choice"),
    (["--num_processes", "16", "--multi_gpu"], "--nproc-per-node 16 exceeds the 8 GPUs of a h200 node"),
])
def test_bad_input_is_one_line_and_exit_2(words, message, script, capsys):
    code = main(["accelerate", "launch", "--gpu", "h200", *words, script])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("phantora:")]
    assert code == 2
    assert len(err) == 1 and err[0].startswith("phantora: error: ") and message in err[0], err


def test_tpu_and_sagemaker_are_not_simulated(script, tmp_path, capsys):
    tpu = tmp_path / "tpu.yaml"
    tpu.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: XLA\nnum_processes: 8\n"
                   "mixed_precision: 'no'\nuse_cpu: false\n")
    assert main(["accelerate", "launch", "--gpu", "h200", "--config_file", str(tpu), script]) == 2
    assert "a TPU launch (distributed_type XLA) is not a CUDA GPU job" in capsys.readouterr().err


def test_only_accelerate_launch(capsys):
    assert main(["accelerate", "config"]) == 2
    assert "invalid choice: 'config'" in capsys.readouterr().err


def test_accelerate_not_installed_is_one_line(script, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "accelerate.commands.launch", None)
    assert main(["accelerate", "launch", "--gpu", "h200", script]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be imported" in err[0] and "accelerate==" in err[0]


def test_help_names_phantoras_options_and_accelerates(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["accelerate", "launch", "--gpu", "h200", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--gpu" in out and "--no-power-cap" in out and "--num_processes" in out and "--mixed_precision" in out
