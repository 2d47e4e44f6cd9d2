"""TorchTitan's trainer, unmodified, with the layer timeline of benchmarks/workloads/timeline.py.

    PHANTORA_BENCH_TIMELINE=DIR torchrun ... -m benchmarks.workloads.torchtitan.timeline_train <torchtitan.train args>

The same as `-m torchtitan.train`, but each transformer block of every model part is timed (its forward's start and
end, its backward's start: host time and a CUDA event each), and each step from the fourth on is recorded between
two synchronizes, TorchTitan's `train_step` (data loading included) inside them. Rank R writes DIR/rank{R}.json when
the trainer returns. Under `phantora torchrun` the same file comes from the simulated clocks, so
`benchmarks/e2e/compare_timeline.py` lines a real run up with its simulation layer by layer: which rank's host or GPU
sets each layer's pace.

The synchronizes stop the host from running ahead into the next step, as TorchTitan's logging step does when it
logs every step (`--metrics.log_freq 1`).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/workloads: `import timeline`
import timeline  # noqa: E402

from torchtitan.train import Trainer  # noqa: E402
from torchtitan.train import main as train  # noqa: E402

FIRST_RECORDED = 3
"""Steps are counted from 0 here; the first three are warm-up."""


def _timed(train_step):
    step = {"n": 0, "installed": False}

    @functools.wraps(train_step)
    def timed_step(self, *args, **kwargs):
        if not step["installed"]:
            timeline.install([layer for part in self.model_parts for layer in part.layers.values()])
            step["installed"] = True
        torch.cuda.synchronize()
        timeline.step_begin(step["n"], FIRST_RECORDED)
        result = train_step(self, *args, **kwargs)
        torch.cuda.synchronize()
        timeline.step_end()
        step["n"] += 1
        return result

    return timed_step


def main() -> None:
    out = os.environ.get("PHANTORA_BENCH_TIMELINE")
    if not out:
        raise SystemExit("timeline_train: set PHANTORA_BENCH_TIMELINE=DIR (where each rank writes its timeline)")
    Trainer.train_step = _timed(Trainer.train_step)
    try:
        train(Trainer)
    finally:
        timeline.dump(out, int(os.environ.get("RANK", "0")))


if __name__ == "__main__":
    main()
