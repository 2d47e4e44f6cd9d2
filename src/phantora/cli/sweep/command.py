"""`phantora sweep [axes] [options] -- BASE COMMAND`: run every combination of the axes as a separate simulation,
then write the table, the plot and the comparison page; `phantora report OUT_DIR` rebuilds a run's or a sweep's
report.html. docs/sweep.md has the whole story.

    phantora sweep --grid 'training.local_batch_size=1,2,4' --gpu h100,h200 --max-memory 70 \\
        -- phantora torchrun --nproc-per-node 8 -m torchtitan.train --job.config_file llama3_8b.toml

The sweep's folder (`--out`, default phantora-sweep/) holds `points/<point>/` (each point's run: its outputs,
report.html, output.log, point.json), `sweep.csv`, `sweep.json`, `sweep.png` and `report.html`. Running the same
command again resumes: points already done (points.py) are not run again.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from phantora.cli.sweep.grid import (CLUSTER_AXES, Axis, BaseCommand, GridError, cluster_axis, grid_points,
                                     parse_env_axis, parse_program_axis, toggle_axis)
from phantora.cli.sweep.local import Interrupted, point_footprint, run_locally
from phantora.cli.sweep.points import PointRun
from phantora.reports.html import ReportError, write_run_html, write_sweep_html
from phantora.reports.sweep import TABLE_JSON, Metric, point_label, point_row, write_plot, write_table

POINTS_DIR = "points"
_INTERRUPTED_EXIT = 130


class SweepError(Exception):
    """Bad input to `phantora sweep` or `phantora report` (one line, exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SweepError(f"{message} (see {self.prog} --help)")


class _AxisAction(argparse.Action):
    """Every axis option appends to one list, so the axes keep the order they were given in."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        axes = getattr(namespace, "axes", None) or []
        try:
            axes.append(self.const(value))
        except GridError as error:
            raise SweepError(str(error)) from None
        namespace.axes = axes


def _cluster(name: str):
    return lambda values: cluster_axis(name, values)


def sweep_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="phantora sweep", formatter_class=argparse.RawDescriptionHelpFormatter,
                     usage="phantora sweep [axes] [options] -- BASE COMMAND (phantora run/torchrun/..., torchrun, "
                           "python)",
                     description="Simulate every combination of the axes, each point a phantora run of its own; "
                                 "write sweep.csv, sweep.json, sweep.png and report.html (docs/sweep.md).")
    parser.set_defaults(axes=[])
    axes = parser.add_argument_group("axes (values separated by commas; every combination is a point)")
    axes.add_argument("--grid", action=_AxisAction, const=parse_program_axis, metavar="OPTION=V1,V2",
                      help="an option of the program: 'training.local_batch_size=1,2,4' sets "
                           "--training.local_batch_size; '--batch=2,4' and '-b=2,4' name it as written")
    axes.add_argument("--toggle", action=_AxisAction, const=toggle_axis, metavar="SWITCH",
                      help="a switch of the program, given and not given (--toggle recompute, or --toggle=--recompute)")
    for name, option in CLUSTER_AXES.items():
        owner = "torchrun's" if name == "nnodes" else "Phantora's"
        axes.add_argument(f"--{name}", action=_AxisAction, const=_cluster(name), metavar="V1,V2",
                          help=f"{owner} {option} in the base command")
    axes.add_argument("--env", action=_AxisAction, const=parse_env_axis, metavar="NAME=V1,V2",
                      help="an environment variable of the program")
    options = parser.add_argument_group("sweep options")
    options.add_argument("--out", default="phantora-sweep", help="the sweep's folder (default phantora-sweep/)")
    options.add_argument("--max-memory", type=_positive, metavar="GIB",
                         help="the memory cap: the fastest point whose peak reserved GPU memory fits it is the answer")
    options.add_argument("--metric", action="append", default=[], metavar="NAME=REGEX",
                         help="a number to read from each point's output (the last match; group 1 if any); "
                              "tokens_per_s is the throughput: 'tokens_per_s=tps: ([0-9,.]+)'")
    options.add_argument("--jobs", type=_positive_int, metavar="N",
                         help="points run at a time here (default: as the cores and memory allow)")
    options.add_argument("--ray", metavar="ADDRESS",
                         help="run the points as tasks on the Ray cluster at ADDRESS (`local`: a Ray instance here)")
    options.add_argument("--ray-cpus", type=_positive, default=1.0, metavar="N",
                         help="CPUs each point's Ray task asks for: one per rank process it runs (default 1)")
    options.add_argument("--ray-working-dir", metavar="DIR",
                         help="a folder Ray copies to every node and runs the points in (default: this folder, "
                              "which must be at the same path on every node)")
    options.add_argument("--dry-run", action="store_true", help="print each point's command and stop")
    parser.add_argument("base", nargs=argparse.REMAINDER, help="-- then the base command")
    return parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(text)


def sweep_main(argv: list[str]) -> int:
    try:
        return _sweep(sweep_parser().parse_args(argv))
    except (SweepError, GridError, ReportError) as error:
        print(f"phantora sweep: error: {error}", file=sys.stderr)
        return 2


def _sweep(args: argparse.Namespace) -> int:
    base_words = args.base[1:] if args.base[:1] == ["--"] else args.base
    if not base_words:
        raise SweepError("no base command: phantora sweep [axes] -- phantora torchrun --gpu h100 ... train.py ARGS")
    try:
        metrics = [Metric.parse(spec) for spec in args.metric]
    except ValueError as error:
        raise SweepError(str(error)) from None
    axes: list[Axis] = args.axes
    points = grid_points(BaseCommand.parse(base_words), axes)
    out = Path(args.out)
    runs = [PointRun(p, out / POINTS_DIR / p.name) for p in points]
    if args.dry_run:
        for run in runs:
            env = " ".join(f"{k}={v}" for k, v in run.point.env.items())
            print(f"{run.point.name}: {env + ' ' if env else ''}phantora {' '.join(run.point.phantora_args(run.folder))}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    done = [r for r in runs if r.done()]
    to_run = [r for r in runs if not r.done()]
    progress = _Progress(len(runs), len(done), args.ray is not None)
    where = f"Ray at {args.ray}" if args.ray else f"{args.jobs or 'auto'} at a time"
    _say(f"{len(runs)} points, {len(done)} done earlier, {len(to_run)} to run ({where}) -> {out}/")
    code = 0
    try:
        if args.ray:
            from phantora.cli.sweep.on_ray import RayError, run_on_ray
            try:
                run_on_ray(to_run, address=args.ray, cpus=args.ray_cpus, working_dir=args.ray_working_dir,
                           on_end=progress.ended(axes, metrics))
            except RayError as error:
                raise SweepError(str(error)) from None
        else:
            known = [f for f in (point_footprint(r.folder) for r in done) if f is not None]
            run_locally(to_run, jobs=args.jobs, on_end=progress.ended(axes, metrics), known=known)
    except Interrupted:
        _say("interrupted: the points that ended are kept; run the same command again to resume")
        code = _INTERRUPTED_EXIT
    table = _write_outputs(runs, out, [a.label for a in axes], metrics, args.max_memory)
    _print_answer(table)
    return code


def _write_outputs(runs: list[PointRun], out: Path, axes: list[str], metrics: list[Metric],
                   max_memory_gib: float | None) -> dict[str, Any]:
    rows = [point_row(r.folder, r.point.settings, metrics) for r in runs]
    table = write_table(rows, out, axes=axes, metrics=metrics, max_memory_gib=max_memory_gib)
    write_plot(table, out)
    write_sweep_html(table, out, POINTS_DIR)
    return table


def _print_answer(table: dict[str, Any]) -> None:
    rows, axes, unit = table["points"], table["axes"], table["throughput_unit"]
    width = max((len(point_label(r, axes)) for r in rows), default=10)
    print(f"\n{'point':<{width}}  {'status':<7}  {'step s':>9}  {unit:>12}  {'MFU %':>6}  {'reserved GiB':>12}")
    for r in rows:
        print(f"{point_label(r, axes):<{width}}  {r['status']:<7}  {_num(r['step_time_s'], '.4f'):>9}  "
              f"{_num(r['throughput'], '.5g'):>12}  {_num(r['mfu'] and 100 * r['mfu'], '.1f'):>6}  "
              f"{_num(r['peak_reserved_gib'], '.2f'):>12}")
    best = next((r for r in rows if r["folder"] == table["best"]), None)
    cap = table["max_memory_gib"]
    fits = f" within {cap:g} GiB" if cap is not None else ""
    if best is None:
        print(f"\nno point completed{fits}")
    else:
        print(f"\nfastest{fits}: {point_label(best, axes)} ({best['throughput']:.5g} {unit}, "
              f"{best['peak_reserved_gib']:.2f} GiB reserved)")
    print(f"table: {TABLE_JSON} and sweep.csv, plot: sweep.png, page: report.html")


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _say(message: str) -> None:
    print(f"phantora sweep: {message}", file=sys.stderr, flush=True)


class _Progress:
    """A line per point that ends: how it ended, points done, running, ETA (mean wall time of the points run
    so far, times the points left, over the points running at a time)."""

    def __init__(self, total: int, done: int, remote: bool) -> None:
        self.total, self.done, self.remote = total, done, remote
        self.walls: list[float] = []
        self.started = time.monotonic()
        self.most_running = 1

    def ended(self, axes: list[Axis], metrics: list[Metric]):
        def on_end(run: PointRun, exit_code: int, wall_s: float, running: int) -> None:
            self.done += 1
            self.walls.append(wall_s)
            self.most_running = max(self.most_running, running + 1)
            if (run.folder / "summary.json").is_file():
                write_run_html(run.folder)  # again, now that output.log holds everything the run printed
            row = point_row(run.folder, run.point.settings, metrics)
            what = row["status"]
            if row["step_time_s"] is not None:
                what += f", step {row['step_time_s']:.4g} s"
            if row["peak_reserved_gib"] is not None:
                what += f", {row['peak_reserved_gib']:.2f} GiB reserved"
            if row["status"] != "ok" and row["error"]:
                what += f" ({row['error'][:120]})"
            left = self.total - self.done
            eta = ""
            if left and not self.remote:
                eta = f", ETA {_duration(sum(self.walls) / len(self.walls) * left / self.most_running)}"
            _say(f"[{self.done}/{self.total}] {run.point.name}: {what} in {wall_s:.0f} s | {running} running{eta}")
        return on_end


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def report_main(argv: list[str]) -> int:
    """`phantora report OUT_DIR`: rebuild report.html of a run's folder or a sweep's."""
    parser = _Parser(prog="phantora report", description="rebuild report.html of a phantora run's or sweep's folder")
    parser.add_argument("out_dir", help="a run's --out folder, or a sweep's")
    try:
        out = Path(parser.parse_args(argv).out_dir)
        if (out / TABLE_JSON).is_file():
            path = _rebuild_sweep(out)
        else:
            path = write_run_html(out)
    except (SweepError, ReportError) as error:
        print(f"phantora report: error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _rebuild_sweep(out: Path) -> Path:
    """A sweep's page from its sweep.json, each point's page from its files."""
    from phantora.reports.html import read_json
    table = read_json(out / TABLE_JSON)
    if table is None or not isinstance(table.get("points"), list):
        raise SweepError(f"{out / TABLE_JSON} is not a sweep's table")
    for row in table["points"]:
        folder = out / POINTS_DIR / row["folder"]
        if (folder / "summary.json").is_file():
            write_run_html(folder)
    return write_sweep_html(table, out, POINTS_DIR)
