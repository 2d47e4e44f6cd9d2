"""`phantora torchrun` arguments: torchrun's spellings and meanings, and one-line errors for bad input."""

from __future__ import annotations

import pytest

from phantora.cli.main import CliError, build_parser, config_from_args, main
from phantora.cli.output import Std


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


def configure(*words: str):
    return config_from_args(build_parser().parse_args(["torchrun", *words]))


def test_torchrun_spellings_and_defaults(script, tmp_path):
    for words in (["--nproc-per-node", "4"], ["--nproc_per_node=4"], ["--nproc_per_node", "4", "--nnodes", "1:1"]):
        config, notes = configure("--gpu", "h200", *words, script, "--lr", "3", "--gpu", "x")
        assert (config.nnodes, config.nproc_per_node, config.world_size) == (1, 4, 4)
        assert config.program.script == script and config.program.args == ["--lr", "3", "--gpu", "x"]
        assert config.cluster.gpus_per_node == 4 and config.cluster.gpu == "h200" and notes == []
        assert config.rank_config.devices_per_process == 4  # each rank sees its node's GPUs, as under torchrun
        assert config.workers.master_port is None and config.workers.max_restarts == 0
        assert config.output.prefix_template == "[rank${rank}]:" and config.shutdown_grace_s == 30
    config, _ = configure("--gpu", "h100", "--nnodes", "2", "--nproc-per-node", "gpu", "--rdzv-id", "job7",
                          "--rdzv_backend", "c10d", "--out", str(tmp_path / "o"), "--no-trace", "--strict", script)
    assert (config.nnodes, config.nproc_per_node) == (2, 8) and config.workers.run_id == "job7"
    assert config.cluster.nodes == 2 and config.cluster.gpus_per_node == 8
    assert config.rank_config.out_dir == str(tmp_path / "o") and config.rank_config.strict
    assert not config.rank_config.trace and config.output.log_dir == str(tmp_path / "o" / "logs")
    config, _ = configure("--gpu", "h200", "--nproc-per-node", "auto", "--standalone", script)
    assert config.nproc_per_node == 8 and len(config.workers.run_id) == 36  # a uuid, as torchrun --standalone


def test_program_forms(script):
    config, _ = configure("--gpu", "h200", "-m", "pkg.train", "--x", "1")
    assert config.program.module == "pkg.train" and config.program.argv() == ["-m", "pkg.train", "--x", "1"]
    config, _ = configure("--gpu", "h200", "--no-python", "python3", "-u", script, "a")
    assert config.program.script == script and config.program.args == ["a"]
    config, _ = configure("--gpu", "h200", "--no_python", "python", "-m", "pkg")
    assert config.program.module == "pkg"
    config, _ = configure("--gpu", "h200", "--run-path", script)
    assert config.program.script == script
    with pytest.raises(CliError, match="only simulate Python"):
        configure("--gpu", "h200", "--no-python", "bash", "run.sh")
    with pytest.raises(CliError, match="--no-python and --module"):
        configure("--gpu", "h200", "--no-python", "-m", "python")


def test_ignored_options_are_named_once(script):
    """One node: the options that would place it among several machines are named, not used."""
    config, notes = configure("--gpu", "h200", "--nnodes", "1", "--nproc-per-node", "8", "--node-rank", "1",
                              "--master-addr", "node0.cluster", "--master_port", "29501", "--max-restarts", "3",
                              "--rdzv-endpoint", "node0:29400", "--monitor-interval", "0.05", script)
    assert len(notes) == 2 and config.rendezvous is None
    assert "--node-rank 1" in notes[0] and "--master-addr node0.cluster" in notes[0] and "rdzv-endpoint" in notes[0]
    assert "--max-restarts 3" in notes[1]
    assert config.workers.master_port == 29501 and config.monitor_interval_s == 0.05


SECRET = "0123456789abcdef0123"


def test_several_launchers_from_torchruns_multi_node_flags(script, tmp_path, monkeypatch):
    """Where the launchers meet decides: every node here, or one launcher per machine."""
    monkeypatch.setenv("PHANTORA_SECRET", SECRET)
    two = ("--gpu", "h200", "--nnodes", "2", "--nproc-per-node", "2")
    config, _ = configure(*two, "--master-port", "29501", script)
    assert config.rendezvous is None and config.workers.master_port == 29501  # both nodes here, as before
    config, notes = configure(*two, "--node-rank", "1", "--master-addr", "node0.cluster", "--master-port", "29501",
                              script)
    spec = config.rendezvous
    assert (spec.host, spec.port, spec.node_rank, spec.secret, spec.join_timeout_s) == ("node0.cluster", 29501, 1,
                                                                                          SECRET, 600.0)
    assert notes == [] and config.workers.master_port is None  # node 0 picks rank 0's store port
    config, _ = configure(*two, "--node-rank", "0", "--master-addr", "10.0.0.1", script)
    assert (config.rendezvous.host, config.rendezvous.port, config.rendezvous.node_rank) == ("10.0.0.1", 29500, 0)
    config, _ = configure(*two, "--node-rank", "0", "--master-port", "29502", script)  # node 0 of a loopback job
    assert (config.rendezvous.host, config.rendezvous.port, config.rendezvous.node_rank) == ("127.0.0.1", 29502, 0)
    config, _ = configure(*two, "--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1]", "--rdzv-conf",
                          "join_timeout=30,read_timeout=60", script)
    spec = config.rendezvous
    assert (spec.host, spec.port, spec.node_rank, spec.join_timeout_s) == ("::1", 29400, None, 30.0)
    assert spec.loopback and SECRET not in repr(spec)
    secret_file = tmp_path / "secret"
    secret_file.write_text("s" * 32 + "\n")
    config, _ = configure(*two, "--rdzv-endpoint", "h:1234", "--secret-file", str(secret_file), script)
    assert (config.rendezvous.port, config.rendezvous.secret) == (1234, "s" * 32)


@pytest.mark.parametrize("words, env, error", [
    (["--rdzv-endpoint", "node0:29400"], None, "needs a shared secret"),
    (["--rdzv-endpoint", "node0:29400"], "short", "at least 16"),
    (["--rdzv-endpoint", "node0:29400", "--secret-file", "/nonexistent/secret"], SECRET, "cannot read --secret-file"),
    (["--rdzv-endpoint", "node0:port"], SECRET, "HOST or HOST:PORT"),
    (["--node-rank", "2", "--master-addr", "node0"], SECRET, "--node-rank must be in 0..1"),
    (["--rdzv-endpoint", "node0", "--rdzv-conf", "join_timeout=soon"], SECRET, "join_timeout"),
])
def test_several_launchers_bad_input_is_one_line(script, monkeypatch, capsys, words, env, error):
    if env is None:
        monkeypatch.delenv("PHANTORA_SECRET", raising=False)
    else:
        monkeypatch.setenv("PHANTORA_SECRET", env)
    assert main(["torchrun", "--gpu", "h200", "--nnodes", "2", "--nproc-per-node", "2", *words, script]) == 2
    err = capsys.readouterr().err
    assert error in err and len(err.strip().splitlines()) == 1 and err.startswith("phantora: error: ")


def test_master_port_is_only_for_the_static_rendezvous(script):
    """With --standalone or a c10d rendezvous torchrun ignores --master-port: its agent picks a free port
    (as Accelerate's launch does when port 29500 is taken)."""
    for words in (["--standalone"], ["--rdzv-backend", "c10d"]):
        config, _ = configure("--gpu", "h200", *words, "--master-port", "29501", script)
        assert config.workers.master_port is None
    config, _ = configure("--gpu", "h200", "--master-port", "29501", script)
    assert config.workers.master_port == 29501


def test_output_options(script, tmp_path):
    config, _ = configure("--gpu", "h200", "--nproc-per-node", "2", "-r", "0:3,1:1", "--tee", "2",
                          "--local_ranks_filter", "0", "--log-dir", str(tmp_path / "logs"), script)
    out = config.output
    assert out.redirects == {0: Std.ALL, 1: Std.OUT} and out.tee == Std.ERR
    assert out.local_ranks_filter == frozenset({0}) and out.log_dir == str(tmp_path / "logs")


def test_environment_defaults_like_torchrun(script, monkeypatch):
    monkeypatch.setenv("PET_NPROC_PER_NODE", "2")
    monkeypatch.setenv("PET_STANDALONE", "1")
    monkeypatch.setenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}${local_rank}]:")
    config, _ = configure("--gpu", "h200", script)
    assert config.nproc_per_node == 2 and len(config.workers.run_id) == 36
    assert config.output.prefix_template == "[${role_name}${local_rank}]:"


def test_log_line_prefix_template_flag_wins_over_the_environment(script, monkeypatch):
    """torchrun 2.14's --log-line-prefix-template; TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE only when it is not given."""
    monkeypatch.setenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}${local_rank}]:")
    config, _ = configure("--gpu", "h200", "--log-line-prefix-template", "${hostname}:${rank}: ", script)
    assert config.output.prefix_template == "${hostname}:${rank}: "


def test_cluster_file(script, tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "b200"\nnodes = 2\ngpus_per_node = 4\n[nic]\nnics_per_node = 4\n')
    config, _ = configure("--cluster", str(cluster), "--nnodes", "2", "--nproc-per-node", "gpu", script)
    assert config.world_size == 8 and config.rank_config.gpu == "b200" and config.cluster.nodes == 2
    config, _ = configure("--cluster", str(cluster), "--nproc-per-node", "3", script)
    assert config.world_size == 3  # one node, partly used


@pytest.mark.parametrize("words, message", [
    (["--gpu", "z9000"], "unknown GPU 'z9000'"),
    (["--gpu", "h200", "--nnodes", "1:4"], "elastic range cannot be simulated"),
    (["--gpu", "h200", "--nnodes", "0"], "--nnodes must be a positive number"),
    (["--gpu", "h200", "--nproc-per-node", "cpu"], "--nproc-per-node must be a number, gpu or auto"),
    (["--gpu", "h200", "--nproc-per-node", "16"], "exceeds the 8 GPUs of a h200 node"),
    (["--gpu", "h200", "--redirects", "9"], "--redirects must be 0-3"),
    (["--gpu", "h200", "--local-ranks-filter", "a,b"], "comma-separated list of integers"),
    (["--gpu", "h200", "--max-restarts", "-1"], "--max-restarts must be >= 0"),
    (["--gpu", "h200", "--start-method", "thread"], "invalid choice"),
    (["--gpu", "h200", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--nproc-per-node", "2"], "one of the arguments --gpu --cluster is required"),
    (["--gpu", "h200", "--cluster", "c.toml"], "not allowed with argument"),
    (["--cluster", "/nonexistent.toml"], "cluster file /nonexistent.toml does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(words, message, script, capsys):
    code = main(["torchrun", *words, script])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("phantora: error: ") and message in err[0], err


def test_cluster_and_job_must_agree(script, tmp_path, capsys):
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "h100"\nnodes = 2\ngpus_per_node = 8\n')
    for words, message in ((["--nnodes", "3", "--nproc-per-node", "8"], "--nnodes 3 exceeds the cluster's 2 nodes"),
                           (["--nproc-per-node", "9"], "--nproc-per-node 9 exceeds the cluster's 8 GPUs per node"),
                           (["--nnodes", "2", "--nproc-per-node", "4"], "must equal the cluster's GPUs per node")):
        assert main(["torchrun", "--cluster", str(cluster), *words, script]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main(["torchrun", "--gpu", "h200", "/nonexistent/train.py"]) == 2
    assert "script not found: /nonexistent/train.py" in capsys.readouterr().err
