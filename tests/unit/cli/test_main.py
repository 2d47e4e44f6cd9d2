"""Command-line parsing: program forms, bad input gives one-line errors."""

import pytest

from phantora.cli.main import CliError, build_parser, config_from_args, main, program_from_args


def test_program_forms(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    p = program_from_args(["--", "python", str(script), "--batch", "8"])
    assert p.script == str(script) and p.args == ["--batch", "8"]
    p = program_from_args(["python3", "-u", str(script)])
    assert p.script == str(script) and p.args == []
    p = program_from_args([str(script), "-x"])
    assert p.args == ["-x"]
    p = program_from_args(["--", "python", "-m", "pkg.train", "--lr", "1"])
    assert p.module == "pkg.train" and p.args == ["--lr", "1"] and p.argv() == ["-m", "pkg.train", "--lr", "1"]


def test_missing_script_and_empty_program():
    with pytest.raises(CliError, match="script not found"):
        program_from_args(["python", "/nonexistent/train.py"])
    with pytest.raises(CliError, match="no program"):
        program_from_args(["--"])


def test_unknown_gpu_is_one_line_error(capsys):
    code = main(["run", "--gpu", "z9000", "--", "python", "x.py"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "unknown GPU 'z9000'" in err[0] and "h200" in err[0]


def test_config_from_args(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    args = build_parser().parse_args(["run", "--gpu", "H200", "--strict", "--out", "o", "--", str(script)])
    config, notes = config_from_args(args)
    rank = config.rank_config
    assert rank.gpu == "h200" and rank.strict and rank.out_dir == "o" and notes == []
    assert config.world_size == 1 and config.workers is None and config.output.prefix_template is None
    assert config.power_cap
    uncapped, _ = config_from_args(build_parser().parse_args(["run", "--gpu", "h200", "--no-power-cap", str(script)]))
    assert not uncapped.power_cap
    bad = build_parser().parse_args(["run", "--gpu", "h200", "--devices", "0", str(script)])
    with pytest.raises(CliError, match="devices"):
        config_from_args(bad)


def test_run_takes_a_cluster_file(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("")
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "a100"\nnodes = 1\n')
    config, _ = config_from_args(build_parser().parse_args(["run", "--cluster", str(cluster), str(script)]))
    assert config.rank_config.gpu == "a100" and config.cluster.gpus_per_node == 8


def test_host_time_options(tmp_path, capsys):
    script = tmp_path / "t.py"
    script.write_text("")
    parse = build_parser().parse_args
    rank = config_from_args(parse(["run", "--gpu", "h200", str(script)]))[0].rank_config
    assert (rank.host_time, rank.host_time_scale) == ("model", 1.0)
    rank = config_from_args(parse(["run", "--gpu", "h200", "--host-time", "measured", "--host-time-scale", "0.8",
                                   str(script)]))[0].rank_config
    assert (rank.host_time, rank.host_time_scale) == ("measured", 0.8)
    rank = config_from_args(parse(["torchrun", "--gpu", "h200", "--host-time", "measured", "--nproc-per-node", "2",
                                   str(script)]))[0].rank_config
    assert (rank.host_time, rank.host_time_scale) == ("measured", 1.0)
    rank = config_from_args(parse(["run", "--gpu", "h200", "--host-time-scale", "0.7", str(script)]))[0].rank_config
    assert (rank.host_time, rank.host_time_scale) == ("model", 0.7)
    for words, message in ((["--host-time", "measured", "--host-time-scale", "0"], "must be a finite number > 0"),
                           (["--host-time", "measured", "--host-time-scale", "fast"], "must be a finite number > 0"),
                           (["--host-time", "measured", "--host-time-scale=-2"], "must be a finite number > 0"),
                           (["--host-time", "wall"], "invalid choice")):
        for command in ("run", "torchrun"):
            assert main([command, "--gpu", "h200", *words, str(script)]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and message in err[0], err
