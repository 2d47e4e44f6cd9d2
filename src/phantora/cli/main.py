"""`phantora` command line: parse -> config -> launch -> report.

    phantora run --gpu h200 -- python train.py --batch 8
    phantora run --gpu h100 --out results/ train.py --batch 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from phantora import __version__
from phantora.cli.launch import LaunchError, ProgramSpec, run_single_process
from phantora.config.run import RankConfig
from phantora.specs import UnknownGpuError, get_gpu_spec, load_gpu_specs


class CliError(Exception):
    """A user mistake on the command line: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phantora", description=(
        "Simulate an unmodified PyTorch training program on a GPU it does not need: "
        "the script's own logs print simulated time; a summary follows."))
    parser.add_argument("--version", action="version", version=f"phantora {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="simulate a single-process script on one simulated GPU",
                              description="phantora run [options] -- python train.py ARGS")
    run.add_argument("--gpu", required=True, help=f"GPU model: {', '.join(sorted(load_gpu_specs()))}")
    run.add_argument("--devices", type=int, default=1, help="CUDA devices the process sees (default 1)")
    run.add_argument("--out", default="phantora-out", help="output folder (default phantora-out/)")
    run.add_argument("--strict", action="store_true",
                     help="fail on ops that have no cost model instead of estimating them")
    run.add_argument("--no-kernel-db", action="store_true",
                     help="ignore measured kernel times; use the analytic cost model only")
    run.add_argument("--no-trace", action="store_true", help="do not write trace.json")
    run.add_argument("program", nargs=argparse.REMAINDER,
                     help="the program: [python [-u]] SCRIPT ARGS | [python] -m MODULE ARGS")
    return parser


def program_from_args(words: list[str]) -> ProgramSpec:
    """Strip a leading `--` and `python [flags]`; keep the script or `-m module` and its arguments."""
    words = list(words)
    if words and words[0] == "--":
        words = words[1:]
    if words and Path(words[0]).name.startswith("python"):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            if words[0] in ("-c",):
                raise CliError("python -c is not supported: put the program in a file")
            words = words[1:]
    if not words:
        raise CliError("no program given: phantora run --gpu h200 -- python train.py ARGS")
    if words[0] == "-m":
        if len(words) < 2:
            raise CliError("-m needs a module name")
        return ProgramSpec(module=words[1], args=words[2:])
    script = Path(words[0])
    if not script.is_file():
        raise CliError(f"script not found: {words[0]}")
    return ProgramSpec(script=str(script), args=words[1:])


def config_from_args(args: argparse.Namespace) -> RankConfig:
    try:
        spec = get_gpu_spec(args.gpu)
    except UnknownGpuError as error:
        raise CliError(str(error)) from None
    try:
        return RankConfig(gpu=spec.key, devices_per_process=args.devices, out_dir=args.out, strict=args.strict,
                          use_kernel_database=not args.no_kernel_db, trace=not args.no_trace)
    except ValueError as error:
        raise CliError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        program = program_from_args(args.program)
        return run_single_process(config, program)
    except (CliError, LaunchError) as error:
        print(f"phantora: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
