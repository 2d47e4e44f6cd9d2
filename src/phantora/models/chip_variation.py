"""Chip-to-chip variation: GPUs of one model do not run tensor-core work at one speed, and a synchronous job runs at
the pace of its slowest GPU.

Note [Chip variation]
Chips of one GPU model differ in how fast their SMs run the same work: at the same board power one H200 of a
machine held 1930 MHz and another 1960 MHz (data/h200/power/chip_spread: back-to-back bf16 GEMMs and flash
attention on four GPUs at once), and its 8192^3 GEMM took 1.5 % more and 1.5 % less time than the four GPUs' mean,
in two rounds alike; below the power limit (the same work half the time) the spread was about the same. Memory-bound
kernels do not vary (adding two 256 MiB tensors: within 0.25 %, the noise): HBM runs at one clock. The same holds in
training steps: in the profiled steps of the fitting set (four GPUs each, `data/h200/e2e/step_profiles/`), one
GPU's GEMMs and attention took up to 2.4 % longer than the mean of its machine's (on one machine the same GPU was
the slowest in four of its five configurations), while the other kernels' spread was 0.34 %. A second machine's
four H200s differed less (within 0.9 %, data/h200/power/chip_spread/runs/). Over 24 chips of six machines the
clocked kernels' spread is 1.02 %.

So each chip's clocked kernels (models/power.py `CLOCKED_CLASSES`) take a factor 1 + sigma * z of their time on
the mean chip, z normal over chips, `clock_sigma` fitted by benchmarks/power/fit_chip_spread.py. The kernel database
and the single-GPU rows it is checked on are the mean chip's (z = 0).

A job whose GPUs synchronize every layer (data, tensor, context and expert parallelism, FSDP) runs each layer at the
pace of its slowest GPU: the faster ones wait in the next collective. The expected slowest of N chips is the largest
of N normal draws: 0.56 sigma above the mean for 2 GPUs, 1.03 for 4, 1.42 for 8, 2.59 for 128, 3.25 for 1024. The
model gives every GPU of the job that pace: the step time is the slowest GPU's, and as every rank has the same
factor, representative ranks (protocol/symmetry.py) and `--ranks all` stay identical. What it leaves out: a real
job's faster GPUs wait where the model has them compute (the timeline shows a little more compute and a little less
waiting than a real one on those GPUs), and a pipeline whose slowest chip is in one stage only slows that stage's
share of the bubble.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from statistics import NormalDist


@dataclass(frozen=True, kw_only=True, slots=True)
class ChipVariation:
    """How much chips of one GPU model differ in the time of their tensor-core (clocked) kernels."""

    clock_sigma: float
    """Standard deviation over chips of a clocked kernel's time, relative to the mean chip's."""

    def __post_init__(self) -> None:
        if not 0 <= self.clock_sigma < 0.2:
            raise ValueError(f"clock_sigma must be in [0, 0.2), got {self.clock_sigma}")

    def slowest_of(self, gpus: int) -> float:
        """Expected time factor of the clocked kernels of the slowest of `gpus` chips over the mean chip's."""
        return 1.0 + self.clock_sigma * expected_largest_normal(gpus)


@cache
def expected_largest_normal(n: int) -> float:
    """The expected largest of `n` standard normal draws: the integral of x n phi(x) Phi(x)^(n-1), by the
    trapezoid rule on [-9, 9] in steps of 1/200 (its integrand is smooth, and below 1e-15 beyond for n < 10^9)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    normal = NormalDist()
    xs = [i / 200 for i in range(-1800, 1801)]
    return sum(x * n * normal.pdf(x) * normal.cdf(x) ** (n - 1) for x in xs) / 200


UNIFORM_CHIPS = ChipVariation(clock_sigma=0.0)
"""Every chip as fast as the mean one (`--no-chip-variation`)."""
