"""`phantora profile` and `python -m phantora.profiler`: parse -> ProfileConfig -> profile_ops (profiler/run.py).

    phantora profile phantora-out/ops.jsonl --out my_h200.jsonl          # measure recorded ops
    phantora profile phantora-out/ --out my_h200.jsonl --only-missing    # only what the shipped DB lacks
    phantora profile --out my_h200.jsonl --script train.py --batch 8     # simulate, then measure

This module imports neither the launcher nor the network model (numpy), so the same command works as
`python -m phantora.profiler ...` on a GPU machine that has only PyTorch; `--script` starts `phantora run`
as its own process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from phantora.profiler.measure import MeasureConfig, ProfilerAttributionError
from phantora.profiler.run import ProfileConfig, ProfileError, profile_ops


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ops", nargs="*", metavar="OPS",
                        help="ops files (ops.jsonl) or output folders of simulations (phantora run/torchrun --out)")
    parser.add_argument("--out", required=True, metavar="DB.jsonl",
                        help="kernel database to write (merged into it if it exists)")
    parser.add_argument("--gpu", help="GPU name of the database (default: the device's, e.g. h200)")
    parser.add_argument("--device", default="cuda:0", help="device to measure on (default cuda:0; cpu: tests only)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per op (default 3)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per op; the median is kept (default 5)")
    parser.add_argument("--hot", action="store_true", help="keep the L2 warm between timed calls (default: evict it)")
    parser.add_argument("--timer", choices=("profiler", "events"), default=None,
                        help="profiler: kernel times from torch.profiler (default); events: CUDA events per call "
                             "(includes launch gaps)")
    parser.add_argument("--only-missing", action="store_true",
                        help="skip signatures the --against databases (default: the shipped one) or --out have")
    parser.add_argument("--against", action="append", default=[], metavar="DB.jsonl",
                        help="database whose signatures --only-missing skips (repeatable)")
    parser.add_argument("--limit", type=int, help="measure at most N signatures, those the simulation spent most time in")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS", help="start no new op after this long")
    parser.add_argument("--report", metavar="FILE.json", help="report of measured and skipped ops "
                                                               "(default: next to --out, .report.json)")
    parser.add_argument("--sim-out", metavar="DIR", help="with --script: the simulation's output folder "
                                                         "(default: <out>-sim/)")
    parser.add_argument("--script", nargs=argparse.REMAINDER, metavar="SCRIPT ARGS",
                        help="simulate `python SCRIPT ARGS` with phantora run first, then measure its ops "
                             "(must come last)")


def config_from_args(args: argparse.Namespace, inputs: list[str] | None = None) -> ProfileConfig:
    try:
        measure = MeasureConfig(device=args.device, warmup=args.warmup, repeat=args.repeat, cold=not args.hot,
                                timer=args.timer)
        return ProfileConfig(inputs=tuple(inputs if inputs is not None else args.ops), out=args.out,
                             measure=measure, gpu=args.gpu, only_missing=args.only_missing,
                             against=tuple(args.against), limit=args.limit, time_limit_s=args.time_limit,
                             report=args.report)
    except (ValueError, RuntimeError) as error:
        raise ProfileError(str(error)) from None


def _simulate(args: argparse.Namespace) -> list[str]:
    """`--script`: run the script under `phantora run` for the local GPU; its output folder holds the ops."""
    script = list(args.script)
    if not script:
        raise ProfileError("--script needs a script: phantora profile --out DB.jsonl --script train.py ARGS")
    gpu = args.gpu
    if gpu is None:
        if args.device == "cpu":
            raise ProfileError("--device cpu needs --gpu NAME (the GPU to simulate and name the database for)")
        import torch

        from phantora.profiler.database import gpu_key_for_device
        if not torch.cuda.is_available():
            raise ProfileError("no CUDA GPU is available (torch.cuda.is_available() is False): "
                               "phantora profile measures ops on a real GPU")
        name = torch.cuda.get_device_name(torch.device(args.device))
        gpu = gpu_key_for_device(name)
        if gpu is None:
            raise ProfileError(f"cannot tell which GPU model {name!r} is; name it with --gpu")
    out = Path(args.out)
    sim_out = args.sim_out or str(out.with_name((out.stem if out.suffix == ".jsonl" else out.name) + "-sim"))
    print(f"phantora profile: simulating {' '.join(script)} on {gpu} to record its ops (into {sim_out}/)",
          file=sys.stderr, flush=True)
    code = subprocess.run([sys.executable, "-m", "phantora.cli.main", "run", "--gpu", gpu, "--out", sim_out,
                           "--no-trace", "--", "python", *script]).returncode
    if not (Path(sim_out) / "ops.jsonl").is_file():
        raise ProfileError(f"the simulation of {script[0]} recorded no ops (exit code {code})")
    if code != 0:
        print(f"phantora profile: the simulation exited with code {code}; measuring the ops it recorded",
              file=sys.stderr, flush=True)
    return [sim_out, *args.ops]


def run_profile(args: argparse.Namespace) -> int:
    """The `profile` subcommand; returns the exit code (2 for bad input, 1 if nothing could be measured)."""
    try:
        inputs = _simulate(args) if args.script is not None else None
        config = config_from_args(args, inputs)
        result = profile_ops(config)
    except (ProfileError, ProfilerAttributionError) as error:
        print(f"phantora: error: {error}", file=sys.stderr)
        return 2
    if result.skipped and not result.measured:
        return 1
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, like `phantora`'s own parser
        raise ProfileError(f"{message} (see {self.prog} --help)")


def main(argv: list[str] | None = None) -> int:
    """`python -m phantora.profiler ...` (the same as `phantora profile ...`, without the launcher's imports)."""
    parser = _Parser(prog="python -m phantora.profiler",
                     description="Measure recorded op signatures on the local GPU into a kernel database.")
    add_profile_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except ProfileError as error:
        print(f"phantora: error: {error}", file=sys.stderr)
        return 2
    return run_profile(args)
