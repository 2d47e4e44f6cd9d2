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


def test_config_from_args():
    args = build_parser().parse_args(["run", "--gpu", "H200", "--strict", "--out", "o", "--", "t.py"])
    config = config_from_args(args)
    assert config.gpu == "h200" and config.strict and config.out_dir == "o"
    bad = build_parser().parse_args(["run", "--gpu", "h200", "--devices", "0", "t.py"])
    with pytest.raises(CliError, match="devices"):
        config_from_args(bad)
