"""Representative ranks: which simulated ranks run a process, and which ranks they stand in for.

Note: [Representative ranks]
Most training jobs run the same program on the same shapes on many ranks: the replicas of data
parallelism, the shards of FSDP, every node of a TP x DP job. Phantora runs a process only for the first
P ranks of the world (the *representatives*; P is the *period*) and takes every other rank r to be the
*mirror* of rank r mod P: it issues the same kernels and collectives at the same simulated times. Each
process group the program builds must fit that picture:

- an *invariant* group, one that shifting every member by P (modulo the world) maps onto itself (the
  data-parallel or FSDP group of a whole job, or one per local rank), is one collective whose mirrored
  members reach it when their representatives do: the network carries it with all its members;
- a *local* group, all of whose members are representatives (a tensor-parallel group inside a node), has
  images on the mirrors (the same group shifted by P, 2P, ...), which start when it starts: the network
  carries them too, so every flow of the real job shares the links it would share;
- a point-to-point transfer must be local (its two ends could not be shifted onto each other).

A group that is neither breaks the symmetry at period P; `refined` gives the smallest period that admits
it, up to P = N (every rank runs: `--ranks all`). The launcher starts at the smallest period, and a rank
that builds a group the period does not admit stops at once; the launcher then starts the job again at the
refined period (cli/launch.py). The images must cross the network as their group does, so a period is
*aligned* with the cluster: it divides the GPUs of a node, or it is a multiple of them that divides the
GPUs under one leaf switch, or it is the whole world (`aligned_periods`).

What a period cannot see, and what the program must therefore not do for its answer to be the answer of
the whole job: give mirrors different shapes or a different program than their representative (uneven
data, a pipeline stage chosen from the rank rather than from a process group, an expert count per rank),
or branch on the values another rank contributes (a mirror's contribution is its representative's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BROKEN_SYMMETRY_EXIT_CODE = 86
"""A rank that built a group its period does not admit exits with this code, after writing
`BROKEN_SYMMETRY_FILE` in its output folder; the launcher then starts the job again at a refined period."""

BROKEN_SYMMETRY_FILE = "broken-symmetry.json"


@dataclass(frozen=True, slots=True)
class RankSymmetry:
    """The world's `world_size` ranks, of which ranks 0..period-1 run (Note [Representative ranks])."""

    world_size: int
    period: int

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 1 <= self.period <= self.world_size or self.world_size % self.period:
            raise ValueError(f"the period of representative ranks must divide the world size: got {self.period} "
                             f"for {self.world_size} ranks")

    @staticmethod
    def everyone(world_size: int) -> "RankSymmetry":
        """Every rank runs its own process."""
        return RankSymmetry(world_size, world_size)

    @property
    def mirrored(self) -> bool:
        """Whether some ranks are mirrors (the job is simulated with fewer processes than ranks)."""
        return self.period < self.world_size

    @property
    def copies(self) -> int:
        """How many times the representatives' pattern repeats over the world (1: no mirrors)."""
        return self.world_size // self.period

    def representative(self, rank: int) -> int:
        return rank % self.period

    def shifted(self, ranks: tuple[int, ...], copy: int) -> tuple[int, ...]:
        """`ranks` moved `copy` periods on, modulo the world, in the same order."""
        step = copy * self.period
        return tuple((r + step) % self.world_size for r in ranks)

    def is_invariant(self, group: tuple[int, ...]) -> bool:
        return set(self.shifted(group, 1)) == set(group)

    def is_local(self, group: tuple[int, ...]) -> bool:
        return all(r < self.period for r in group)

    def admits(self, group: tuple[int, ...], *, point_to_point: bool = False) -> bool:
        """Whether the group (or the two ends of a transfer) fits this period."""
        if self.is_local(group):
            return True
        return not point_to_point and self.is_invariant(group)

    def images(self, group: tuple[int, ...]) -> list[tuple[int, ...]]:
        """A local group's copies on the mirrors (none for an invariant group: it already holds them)."""
        if not self.mirrored or not self.is_local(group):
            return []
        return [self.shifted(group, k) for k in range(1, self.copies)]

    def refined(self, group: tuple[int, ...], *, point_to_point: bool = False,
                aligned: tuple[int, ...] | None = None) -> "RankSymmetry":
        """The symmetry with the smallest period, a multiple of this one among `aligned` (default: every
        divisor of the world), that admits `group`; the world size always does."""
        candidates = aligned if aligned is not None else _divisors(self.world_size)
        for period in sorted(candidates):
            if period % self.period or self.world_size % period:
                continue
            candidate = RankSymmetry(self.world_size, period)
            if candidate.admits(group, point_to_point=point_to_point):
                return candidate
        return RankSymmetry.everyone(self.world_size)


def aligned_periods(world_size: int, gpus_per_node: int, gpus_per_leaf: int) -> tuple[int, ...]:
    """The periods whose images cross the network as their group does (Note [Representative ranks]): the
    divisors of a node's GPUs, the multiples of a node that divide a leaf switch's GPUs, and the world."""
    periods = {world_size}
    for p in _divisors(world_size):
        if gpus_per_node % p == 0 or (p % gpus_per_node == 0 and gpus_per_leaf % p == 0):
            periods.add(p)
    return tuple(sorted(periods))


def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small) | {n // d for d in small}))
