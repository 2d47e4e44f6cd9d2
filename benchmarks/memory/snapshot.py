"""Run a training script with the CUDA caching allocator's history recorded, and dump its memory snapshot
(`torch.cuda.memory._dump_snapshot`: every segment, block and allocator event with its Python stack) when the
script ends, for comparing a real run's peak with a simulated one's.

    python -m benchmarks.memory.snapshot OUT.pickle SCRIPT [ARGS...]

Read it with `torch.cuda._memory_viz` (or https://pytorch.org/memory_viz).
"""

from __future__ import annotations

import runpy
import sys

import torch


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out, script, *args = sys.argv[1:]
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch.cuda.memory._dump_snapshot(out)


if __name__ == "__main__":
    main()
