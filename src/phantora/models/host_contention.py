"""Host contention: the CPUs of a job's ranks do not all run at one speed, and the job waits for the slowest.

Note [Contended hosts]
On the H200 machines the host model was measured on (VMs), a process's main thread runs at one of two
speeds, and which one changes about every half second (specs/h200/host_contention.json, fitted by
benchmarks/host/fit_contention.py on the host-speed probes in data/h200/e2e/timelines: 459 probes of real
runs on four leases; 1647 probes on ten leases give 0.52, 1.48 and a correlation time of 0.23 s):
- about half the time (0.53; 0.28, 0.40, 0.72 and 0.85 on the four leases) its vCPU is contended below the
  guest, and the same host work takes 1.47x as long (a rank's forward host time in steps that were
  contended throughout, over uncontended steps; a pure-Python loop 1.7x, kernel launches 1.4x);
- the state of one rank persists for a correlation time of ~0.45 s (step to step it leaves "contended"
  with probability 0.23 and enters it with 0.26, 223 ms apart) and is independent of the other ranks'.

The host model's constants (models/host.py) were fitted on these hosts, at whatever contention their
runs had, and taken to the average lease (benchmarks/host/leases.py): they are the mean host's. A single
process therefore keeps them. A job of N ranks does not:
at each collective whose peers wait on host work (a tensor-parallel layer's all-reduce) every GPU waits
for the slowest host, and the more ranks, the likelier one of them is contended (0.78 of the time for
2 ranks, 0.95 for 4). Drawing each rank's state at random would make a short run's prediction a single
draw; instead each rank gets the *expected* speed of its place among N hosts drawn from that
distribution: the k-th fastest of N is contended when at least N-k+1 of them are, a binomial tail, so
its expected time factor is 1 + (c - 1) P(Binomial(N, p) >= N-k+1). Over the ranks these factors
average the mean host's, so the work of the whole job is unchanged; only its spread is new. Which rank
holds which place is a seeded permutation that changes every `dwell_s` of the rank's simulated host
time, as the contended vCPUs move: deterministic, the same on every run.

"none", the default, gives every rank the uncontended host (the mean host's constants over the mean
factor): a cluster of dedicated server machines of the CPU class the constants were measured on (the
Xeon server CPUs of the lent H200 machines), as DGX/HGX users have. The measured VMs' hosts are the
explicit option "h200-vm", which the accuracy benchmarks use because their ground truth ran there.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

PERMUTATION_SEED = 20261122


@dataclass(frozen=True, kw_only=True, slots=True)
class HostContention:
    """How often a rank's host CPU is contended, how much slower it then is, and how long that lasts."""

    contended_fraction: float
    """Probability that a rank's host is contended at a given moment."""
    contended_factor: float
    """Host time of the same work on a contended host over an uncontended one."""
    dwell_s: float
    """How long the hosts keep their places before the contended ones move (the correlation time)."""

    def __post_init__(self) -> None:
        if not 0 <= self.contended_fraction <= 1 or self.contended_factor < 1 or self.dwell_s <= 0:
            raise ValueError(f"invalid host contention {self}")

    def mean_factor(self) -> float:
        """Expected host time factor of one host, relative to an uncontended one."""
        return 1 + (self.contended_factor - 1) * self.contended_fraction

    def place_factors(self, n: int) -> list[float]:
        """Expected host time factor, relative to an uncontended host, of the fastest to the slowest of `n`."""
        tails = _binomial_tails(n, self.contended_fraction)
        extra = self.contended_factor - 1
        return [1 + extra * tails[n - k + 1] for k in range(1, n + 1)]


def _binomial_tails(n: int, p: float) -> list[float]:
    """P(Binomial(n, p) >= j) for j = 0 .. n + 1; in log space, so that thousands of ranks neither
    overflow the binomial coefficients nor underflow (1 - p)^n."""
    if p <= 0 or p >= 1:
        return [1.0] * (1 if p <= 0 else n + 1) + [0.0] * (n + 1 if p <= 0 else 1)
    log_p, log_q = math.log(p), math.log1p(-p)
    pmf = [math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q)
           for j in range(n + 1)]
    tails = [0.0] * (n + 2)
    for j in range(n, -1, -1):
        tails[j] = min(1.0, tails[j + 1] + pmf[j])
    return tails


DEDICATED = HostContention(contended_fraction=0.0, contended_factor=1.0, dwell_s=1.0)
"""Hosts whose CPUs nothing else contends."""

HOST_CONTENTION_CHOICES = ("h200-vm", "none")
"""`--host-contention`: "h200-vm", hosts contended as those the host model was measured on (the GPU profile's
`host_contention`, fitted on the lent H200 VMs); "none", dedicated hosts."""
DEFAULT_HOST_CONTENTION = "none"
"""Dedicated hosts: what `--host-contention` is unless given (a user's cluster, not the VMs we measured on)."""


def contention_for(choice: str, measured: HostContention) -> HostContention:
    """The hosts `--host-contention choice` simulates, given those the host constants were `measured` on."""
    if choice not in HOST_CONTENTION_CHOICES:
        raise ValueError(f"--host-contention must be one of {', '.join(HOST_CONTENTION_CHOICES)}, got {choice!r}")
    return measured if choice == "h200-vm" else DEDICATED


class HostSpeed:
    """One rank's host time factor over simulated time, relative to the host model's constants (the mean host
    of those they were `measured` on), on hosts contended as `contention` says."""

    __slots__ = ("_ranks", "_factors", "_uniform", "_dwell_ns", "_interval", "_factor")

    def __init__(self, contention: HostContention, rank: int, world_size: int, measured: HostContention, *,
                 stands_for: tuple[int, ...] = ()) -> None:
        """`stands_for`: with representative ranks, the ranks this one runs for (protocol/symmetry.py); its
        host is the slowest of theirs in each interval: a collective across them waits for that one."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside a world of {world_size}")
        mean = measured.mean_factor()
        self._ranks = stands_for or (rank,)
        self._factors = [f / mean for f in contention.place_factors(world_size)]
        self._uniform = self._factors[0] == self._factors[-1]
        self._dwell_ns = round(contention.dwell_s * 1e9)
        self._interval = None
        self._factor = self._factors[0]

    def factor(self, t_ns: int) -> float:
        """Host time factor of work that starts at simulated host time `t_ns`."""
        if self._uniform:
            return self._factor
        interval = t_ns // self._dwell_ns
        if interval != self._interval:
            self._interval = interval
            places = list(range(len(self._factors)))
            random.Random(PERMUTATION_SEED + interval).shuffle(places)
            self._factor = max(self._factors[places[r]] for r in self._ranks)
        return self._factor
