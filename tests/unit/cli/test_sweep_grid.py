"""`phantora sweep`'s grid: axis syntax, where the program's arguments start, how each point's command is made,
when a point counts as done (resume), how many points run at a time; bad input is one line and exit code 2."""

from __future__ import annotations

import json

import pytest

from phantora.cli.main import main
from phantora.cli.sweep.grid import (BaseCommand, GridError, cluster_axis, grid_points, parse_env_axis,
                                     parse_program_axis, toggle_axis, with_option)
from phantora.cli.sweep.local import Footprint, concurrency
from phantora.cli.sweep.points import PointRun, interrupted
from phantora.units import GiB


def test_program_axis_syntax():
    axis = parse_program_axis("training.local_batch_size=1,2,4")
    assert axis.name == "--training.local_batch_size" and axis.values == ("1", "2", "4")
    assert axis.label == "training.local_batch_size"
    assert parse_program_axis("--batch=2,4").name == "--batch"
    assert parse_program_axis("-b=2").name == "-b"
    assert toggle_axis("recompute").name == "--recompute" and toggle_axis("--recompute").values == ("on", "off")
    assert parse_env_axis("NCCL_ALGO=Ring,Tree").values == ("Ring", "Tree")
    for bad in ("batch", "=1,2", "batch=1,,2", "batch=1,1", "batch="):
        with pytest.raises(GridError):
            parse_program_axis(bad)
    with pytest.raises(GridError):
        parse_env_axis("1BAD=x")


def test_base_command_finds_the_program(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    base = BaseCommand.parse(["phantora", "torchrun", "--gpu", "h100", "--nproc-per-node", "2", str(script),
                              "--batch", "8", "--nproc-per-node", "3"])
    assert base.command == ("torchrun",)
    assert base.launcher == ("--gpu", "h100", "--nproc-per-node", "2")
    assert base.program_head == (str(script),) and base.program_args == ("--batch", "8", "--nproc-per-node", "3")
    base = BaseCommand.parse(["run", "--gpu", "h200", "--", "python", "-u", str(script), "--lr", "1"])
    assert base.launcher == ("--gpu", "h200") and base.program_head == ("--", "python", "-u", str(script))
    assert base.program_args == ("--lr", "1")
    # a bare python command is `phantora run`; a bare torchrun command is `phantora torchrun`
    assert BaseCommand.parse(["python", str(script), "-x"]).command == ("run",)
    assert BaseCommand.parse(["torchrun", "--nproc-per-node", "2", "-m", "pkg.train", "--y"]).program_args == ("--y",)
    with pytest.raises(GridError, match="phantora command"):
        BaseCommand.parse(["bash", "x.sh"])


def test_with_option_replaces_or_adds():
    assert with_option(["--batch", "8", "--lr", "1"], "--batch", "4") == ["--batch", "4", "--lr", "1"]
    assert with_option(["--batch=8"], "--batch", "4") == ["--batch=4"]
    assert with_option(["--lr", "1"], "--batch", "4") == ["--lr", "1", "--batch", "4"]
    assert with_option(["--lr", "1"], "--batch", "4", at=0) == ["--batch", "4", "--lr", "1"]
    assert with_option(["--cluster", "a.toml", "--x"], "--cluster", None) == ["--x"]


def test_points_edit_the_command(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    base = BaseCommand.parse(["torchrun", "--cluster", "c.toml", "--nproc-per-node", "2", str(script), "--batch", "8",
                              "--recompute"])
    axes = [parse_program_axis("batch=4,16"), toggle_axis("recompute"), cluster_axis("gpu", "h100"),
            parse_env_axis("NCCL_ALGO=Tree")]
    points = grid_points(base, axes)
    assert [p.settings for p in points] == [
        {"batch": "4", "recompute": "on", "gpu": "h100", "NCCL_ALGO": "Tree"},
        {"batch": "4", "recompute": "off", "gpu": "h100", "NCCL_ALGO": "Tree"},
        {"batch": "16", "recompute": "on", "gpu": "h100", "NCCL_ALGO": "Tree"},
        {"batch": "16", "recompute": "off", "gpu": "h100", "NCCL_ALGO": "Tree"}]
    args = points[1].phantora_args(tmp_path / "p")
    # --gpu replaces --cluster; the program's own --batch changed, its --recompute dropped; progress off
    assert args == ["torchrun", "--no-progress", "--out", str(tmp_path / "p"), "--gpu", "h100", "--nproc-per-node",
                    "2", str(script), "--batch", "4"]
    assert points[1].env == {"NCCL_ALGO": "Tree"}
    assert points[0].name == "batch=4,recompute=on,gpu=h100,NCCL_ALGO=Tree"
    assert len({p.name for p in points}) == 4


def test_grid_errors(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    base = BaseCommand.parse(["run", "--gpu", "h100", "--", "python", str(script)])
    with pytest.raises(GridError, match="torchrun"):
        grid_points(base, [cluster_axis("nnodes", "1,2")])
    with pytest.raises(GridError, match="twice"):
        grid_points(base, [parse_program_axis("batch=1"), parse_program_axis("--batch=2")])


def test_a_point_is_done_when_it_ended_by_itself(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    base = BaseCommand.parse(["run", "--gpu", "h100", "--", "python", str(script)])
    point = grid_points(base, [parse_program_axis("batch=1")])[0]
    run = PointRun(point, tmp_path / "p")
    assert not run.done()
    run.folder.mkdir()
    (run.folder / "point.json").write_text(json.dumps(run.record()))  # started, never ended
    assert not run.done()
    run.finish(0, 1.0)
    assert run.done()
    run.finish(1, 1.0)  # failed in the program (an OOM): deterministic, not run again
    assert run.done()
    run.finish(130, 1.0)  # stopped by SIGINT
    assert not run.done() and interrupted(143) and interrupted(-9) and not interrupted(2)
    # another base command: the recorded point is someone else's
    other = grid_points(BaseCommand.parse(["run", "--gpu", "h200", "--", "python", str(script)]),
                        [parse_program_axis("batch=1")])[0]
    run.finish(0, 1.0)
    assert not PointRun(other, run.folder).done()


def test_concurrency_from_the_largest_point():
    assert concurrency(None, cores=64, memory_bytes=512 * GiB) == 1  # nothing known yet: one point first
    four_ranks = Footprint(processes=4, memory_bytes=2 * GiB)
    assert concurrency(four_ranks, cores=16, memory_bytes=512 * GiB) == 4  # cores bound
    assert concurrency(four_ranks, cores=64, memory_bytes=10 * GiB) == 4  # 0.8 x 10 GiB / 2 GiB
    assert concurrency(four_ranks, cores=2, memory_bytes=1 * GiB) == 1  # never below one


def test_bad_sweep_input_is_one_line(capsys, tmp_path):
    assert main(["sweep", "--grid", "batch", "--", "run", "--gpu", "h100", "--", "python", "x.py"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--grid" in err[0]
    assert main(["sweep", "--grid", "batch=1"]) == 2
    assert "no base command" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "summary.json" in err[0]


def test_dry_run_prints_every_point(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    assert main(["sweep", "--out", str(tmp_path / "s"), "--grid", "batch=1,2", "--gpu", "h100,h200", "--dry-run",
                 "--", "python", str(script), "--batch", "8"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("batch=2,gpu=h200: phantora run --no-progress --out")
    assert lines[-1].endswith(f"--gpu h200 -- python {script} --batch 2")
