"""Run a training program unmodified under PyTorch's profiler and keep one step's kernel-level Chrome trace.

A step is what lies between two `optimizer.step()` calls (PyTorch's global optimizer step hook, which fires for
every torch optimizer, also those a framework wraps: Megatron's, DeepSpeed's with a torch optimizer). The profiler
skips `--wait` steps, warms up for `--warmup`, records `--active` steps, and this rank's trace is written gzipped to
`OUT/rank<R>.trace.json.gz` (ranks in `--ranks` only). Under torchrun:

    torchrun --standalone --nproc-per-node 4 -m benchmarks.e2e.frameworks.profile_program --out DIR -- SCRIPT ARGS

`benchmarks/e2e/compare_step.py` lines such a trace up with a simulated one.
"""

from __future__ import annotations

import argparse
import gzip
import os
import runpy
import shutil
import sys
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--wait", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--active", type=int, default=1)
    p.add_argument("--ranks", default="0,1", help="comma-separated ranks that keep a trace")
    if "--" not in argv:
        p.error("give the program after --")
    split = argv.index("--")
    return p.parse_args(argv[:split]), argv[split + 1:]


def write_trace(profiler: torch.profiler.profile, out: Path, rank: int) -> None:
    plain = out / f"rank{rank}.trace.json"
    profiler.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(f"{plain}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()


def main() -> None:
    args, program = parse(sys.argv[1:])
    rank = int(os.environ.get("RANK", "0"))
    keep = rank in {int(r) for r in args.ranks.split(",")}
    args.out.mkdir(parents=True, exist_ok=True)
    profiler = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
        on_trace_ready=(lambda p: write_trace(p, args.out, rank)) if keep else (lambda p: None))
    profiler.start()
    register_optimizer_step_post_hook(lambda *_: profiler.step())
    sys.argv = program
    sys.path[0] = os.path.dirname(os.path.abspath(program[0]))  # as `python SCRIPT` sets it
    try:
        runpy.run_path(program[0], run_name="__main__")
    finally:
        profiler.stop()


if __name__ == "__main__":
    main()
