"""`phantora deepspeed`: DeepSpeed's launcher options, read by DeepSpeed's own runner, become the workers
deepspeed/launcher/launch.py would start (arguments and environment; no rank runs here)."""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("deepspeed.launcher.runner")

from phantora.cli.launch import DeepSpeedEnv, rank_environment  # noqa: E402
from phantora.cli.main import config_from_args, main, parse_command_line  # noqa: E402
from phantora.cli.output import Std  # noqa: E402

DS_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .deepspeed_env or hostfile of the repository's
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


def configure(*words: str, gpu: str = "h200"):
    return config_from_args(parse_command_line(["deepspeed", "--gpu", gpu, *words]))


def worker_env(config, rank: int) -> dict[str, str]:
    """What rank `rank` gets, over an empty launcher environment, with MASTER_PORT 29611."""
    env = rank_environment(config, rank, rank % config.nproc_per_node, rank_config=config.rank_config,
                           token="t", master_port=29611, base={})
    return {k: v for k, v in env.items() if k != "PHANTORA_RUN_CONFIG"}


def test_workers_get_what_launch_py_gives_them(script):
    config, notes = configure("--out", "o", "--strict", "--num_gpus", "2", script, "--deepspeed_config", "ds.json")
    assert (config.nnodes, config.nproc_per_node, config.cluster.gpus_per_node) == (1, 2, 2) and notes == []
    assert config.rank_config.out_dir == "o" and config.rank_config.strict  # Phantora's options come first
    assert config.rank_config.devices_per_process == 2  # CUDA_VISIBLE_DEVICES=0,1: each worker sees both
    assert isinstance(config.workers, DeepSpeedEnv) and config.workers.master_port is None  # 29500: a free port
    for rank in (0, 1):
        assert config.program.argv(rank) == [script, f"--local_rank={rank}", "--deepspeed_config", "ds.json"]
        assert worker_env(config, rank) == {
            "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1", "PHANTORA_COORDINATOR_TOKEN": "t", "CUDA_VISIBLE_DEVICES": "0,1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29611", "WORLD_SIZE": "2", "CROSS_RANK": "0",
            "CROSS_SIZE": "1", "LOCAL_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank)}
    assert config.output.prefix_template == "" and config.output.redirects == Std.NONE  # lines as DeepSpeed's
    config, _ = configure("--out=o2", "--master_port", "29555", script)
    assert config.workers.master_port == 29555 and config.rank_config.out_dir == "o2"


def test_all_gpus_of_a_simulated_node_by_default(script, tmp_path):
    config, _ = configure(script)
    assert config.world_size == 8 and config.workers.visible_devices == (tuple(range(8)),)
    config, _ = configure("--num_gpus", "-1", script, gpu="a100")
    assert config.world_size == 8
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "b200"\nnodes = 2\ngpus_per_node = 4\n[nic]\nnics_per_node = 4\n')
    config, _ = config_from_args(parse_command_line(["deepspeed", "--cluster", str(cluster), script]))
    assert config.world_size == 4 and config.rank_config.gpu == "b200"


def test_include_exclude_and_visible_devices_as_deepspeed(script, monkeypatch):
    config, _ = configure("--include", "localhost:1,3", script)
    assert config.workers.visible_devices == ((1, 3),) and worker_env(config, 1)["CUDA_VISIBLE_DEVICES"] == "1,3"
    config, _ = configure("-e", "localhost:0", script)
    assert config.workers.visible_devices == ((1, 2, 3, 4, 5, 6, 7),)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")  # DeepSpeed's runner takes it as --include localhost:2,5
    config, notes = configure(script)
    assert config.workers.visible_devices == ((2, 5),) and notes == []
    assert worker_env(config, 0)["CUDA_VISIBLE_DEVICES"] == "2,5"
    config, notes = configure("--num_gpus", "1", script)
    assert config.workers.visible_devices == ((0,),) and "CUDA_VISIBLE_DEVICES=2,5 is ignored" in notes[0]


def test_hostfile_nodes(script, tmp_path, monkeypatch):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# two nodes\nworker-0 slots=4\nworker-1 slots=4\n")
    (tmp_path / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\nMY_FLAG = a=b\n")
    monkeypatch.setenv("PYTHONPATH", "/opt/lib")
    config, _ = configure("--hostfile", str(hostfile), script)
    assert (config.nnodes, config.nproc_per_node, config.cluster.nodes, config.cluster.gpus_per_node) == (2, 4, 2, 4)
    env = worker_env(config, 5)
    assert (env["RANK"], env["LOCAL_RANK"], env["CROSS_RANK"], env["CROSS_SIZE"]) == ("5", "1", "1", "2")
    assert (env["WORLD_SIZE"], env["LOCAL_SIZE"], env["CUDA_VISIBLE_DEVICES"]) == ("8", "4", "0,1,2,3")
    # several nodes start as pdsh starts them: the working folder first on PYTHONPATH, .deepspeed_env exported
    assert env["PYTHONPATH"] == f"{os.getcwd()}:/opt/lib" and env["NCCL_DEBUG"] == "INFO" and env["MY_FLAG"] == "a=b"
    config, _ = configure("-H", str(hostfile), "--num_nodes", "1", "--num_gpus", "2", script)
    assert config.workers.visible_devices == ((0, 1),) and "PYTHONPATH" not in config.extra_env  # one node: local
    config, _ = configure("-H", str(hostfile), "--include", "worker-1:2,3", script)
    assert config.workers.visible_devices == ((2, 3),)
    config, _ = configure("-H", str(hostfile), "--force_multi", "--include", "worker-1:2,3", script)
    assert "PYTHONPATH" in config.extra_env


def test_program_forms(script):
    config, _ = configure("--module", "pkg.train", "--x", "1")
    assert config.program.argv(1) == ["-m", "pkg.train", "--local_rank=1", "--x", "1"]
    config, _ = configure("--no_local_rank", script, "--x")
    assert config.program.argv(1) == [script, "--x"]
    config, _ = configure("--no_python", "--no_local_rank", sys.executable, "-u", script, "a")
    assert config.program.script == script and config.program.argv(0) == [script, "a"]


def test_options_without_meaning_here_are_named_once(script, tmp_path):
    config, notes = configure("--master_addr", "10.0.0.1", "--ssh_port", "2222", "--bind_cores_to_rank",
                              "--save_pid", "--log_level", "debug", "-q", script)
    assert len(notes) == 1 and "--master_addr 10.0.0.1" in notes[0] and "--ssh_port 2222" in notes[0]
    assert "--bind_cores_to_rank" in notes[0] and "--save_pid" in notes[0]
    config, notes = configure("--hostfile", str(tmp_path / "missing"), script)
    assert config.world_size == 8 and "not found: one node, localhost" in notes[0]


def test_each_rank_log(script, tmp_path):
    config, _ = configure("--enable_each_rank_log", str(tmp_path / "logs"), script)
    out = config.output
    assert out.redirects == Std.ALL and out.log_dir == str(tmp_path / "logs")
    assert out.log_file.endswith("_rank{rank}.log") and "{stream}" not in out.log_file  # both streams, one file


@pytest.mark.parametrize("words, message", [
    (["--frobnicate"], "deepspeed: unrecognized arguments: --frobnicate"),
    (["--num_gpus", "1", "--strict"], "--strict (Phantora's options come before the deepspeed options)"),
    (["--num_gpus", "2", "--include", "localhost:0"], "Cannot specify num_nodes/gpus with include/exclude"),
    (["--include", "localhost:9"], "No slot '9' specified on host 'localhost'"),
    (["--num_nodes", "2"], "Num nodes is >1 but no extra nodes available via hostfile"),
    (["--num_gpus", "16"], "GPU 15 does not exist: a simulated node has 8 GPUs"),
    (["--autotuning", "tune"], "--autotuning tune: DeepSpeed's autotuner measures trial runs"),
    (["--no_python", "bash"], "Phantora can only simulate Python programs"),
    (["--no_python", "python3"], "DeepSpeed would pass --local_rank=N to the interpreter itself"),
    (["--no_python", "--module", "python3"], "Don't use both the '--no_python' flag and the '--module' flag"),
    (["missing.py"], "script not found: missing.py"),
    ([], "the following arguments are required: user_script"),
])
def test_bad_input_is_one_line_and_exit_2(words, message, script, capsys):
    code = main(["deepspeed", "--gpu", "h200", *words, *([script] if words and words[0] != "--no_python"
                                                            and words != ["missing.py"] else [])])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("phantora: error: ") and message in err[0], err


def test_bad_hostfiles_and_launchers(script, tmp_path, capsys):
    hostfile = tmp_path / "hostfile"
    cases = [("worker-0 slots=4\nworker-1 slots=4\n", ["--launcher", "openmpi"], "--launcher openmpi"),
             ("worker-0 slots=4\nworker-1 slots=4\n", ["--include", "worker-0:0@worker-1"], "worker-0: 1, worker-1: 4"),
             ("worker-0 slots=16\n", [], "worker-0 has slots=16, but a simulated node has 8 GPUs"),
             ("worker-0 slots\n", [], "Hostfile contains a bad entry: worker-0 slots")]
    for text, words, message in cases:
        hostfile.write_text(text)
        assert main(["deepspeed", "--gpu", "h200", "-H", str(hostfile), *words, script]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main(["deepspeed", "--gpu", "h200", "--enable_each_rank_log", script, script]) == 2  # a file
    assert "should not be a file" in capsys.readouterr().err


def test_deepspeed_not_installed_is_one_line(script, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "deepspeed.launcher.runner", None)  # import fails
    assert main(["deepspeed", "--gpu", "h200", script]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be imported" in err[0] and "pip install" in err[0] and "deepspeed==" in err[0]


def test_help_names_phantoras_options_and_deepspeeds(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["deepspeed", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "phantora deepspeed [phantora options] [deepspeed options] SCRIPT ARGS" in out
    assert "--gpu" in out and "--host-time" in out and "--num_gpus" in out and "--include" in out


def test_a_job_config_round_trips_to_the_rank(script):
    config, _ = configure("--num_gpus", "2", script)
    env = rank_environment(config, 1, 1, rank_config=config.rank_config, token="t", master_port=1, base={})
    assert json.loads(env["PHANTORA_RUN_CONFIG"])["devices_per_process"] == 2
