"""Representative ranks: which simulated ranks run a process, and which ranks they stand in for.

Note: [Representative ranks]
Most training jobs run the same program on the same shapes on many ranks: the replicas of data
parallelism, the shards of FSDP, the ranks of a tensor-parallel group. Their ranks form a mesh (the
program's `DeviceMesh`, or Megatron's groups): rank r has a coordinate (r // stride) % size along each
mesh axis. Phantora folds some axes: only the ranks whose coordinate on every folded axis is 0 run a
process (the *representatives*), and every other rank is the *mirror* of the representative with the same
coordinates on the other axes: it is taken to issue the same kernels and collectives at the same simulated
times. A translation along a folded axis (coordinate c -> (c + k) mod size, within the axis's block of
stride x size ranks) maps a representative onto its mirrors. Each process group the program uses must
fit that picture, axis by axis:

- along an axis where the group is *invariant* (the translation maps it onto itself: an FSDP or
  data-parallel group along that axis), its mirrored members reach each collective when their
  representatives do, and the network carries it with all its members;
- along an axis where the group is *local* (every member has coordinate 0: a tensor-parallel group seen
  from the data-parallel axis), it has copies on the mirrors, the group translated, which start when it
  starts; the network carries them too, so every flow of the real job shares the links it would share.
A point-to-point transfer (a pipeline's send/recv) and a group of a real backend (gloo, which exchanges
real data) must be local along every folded axis: both ends, all members, run.

The launch starts with every rank folded onto rank 0. A rank that uses a group (or makes a transfer) the
symmetry does not admit stops, reporting every group it built; the launcher starts the job again with the
symmetry that admits every group reported so far and runs the fewest processes (`best_symmetry`), up to
every rank. A folding is chosen only where each copy sits on the cluster as its group does (the same GPUs
of their nodes up to a shift, the same nodes and leaf switches relative to each other: `placement`), so
that it crosses NVLink, NICs and leaves as its group does; a path across spines may take other spines
(ECMP hashes the NICs), and there the copy's timing is a statistical image of its group's, not an exact one.

What the folding cannot see, and what the program must therefore not do for its answer to be the answer
of the whole job: give mirrors different shapes or a different program than their representative (uneven
data, a pipeline stage or an expert count chosen from the rank rather than from a process group), or
branch on the values another rank contributes (a mirror's contribution is its representative's). Host work
that depends on a rank's own data (tokenizing its text) is charged to a mirror as its representative's.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

BROKEN_SYMMETRY_EXIT_CODE = 86
"""A rank that uses a group its symmetry does not admit exits with this code, after writing
`BROKEN_SYMMETRY_FILE` in its output folder; the launcher then starts the job again with a finer symmetry."""

BROKEN_SYMMETRY_FILE = "broken-symmetry.json"


@dataclass(frozen=True, slots=True, order=True)
class Axis:
    """A mesh axis: rank r's coordinate along it is (r // stride) % size."""

    stride: int
    size: int

    @property
    def block(self) -> int:
        return self.stride * self.size

    def coordinate(self, rank: int) -> int:
        return (rank // self.stride) % self.size

    def shift(self, rank: int, k: int) -> int:
        c = self.coordinate(rank)
        return rank + ((c + k) % self.size - c) * self.stride

    @staticmethod
    def of(group: tuple[int, ...]) -> "Axis | None":
        """The axis a group spans, when it is one (evenly spaced from a coordinate-0 rank), else None."""
        if len(group) < 2:
            return None
        ranks = sorted(group)
        stride = ranks[1] - ranks[0]
        axis = Axis(stride, len(ranks))
        if any(b - a != stride for a, b in zip(ranks, ranks[1:])) or axis.coordinate(ranks[0]) != 0:
            return None
        return axis


@dataclass(frozen=True, slots=True)
class RankSymmetry:
    """The world's ranks with `axes` folded (Note [Representative ranks]); no axes: every rank runs."""

    world_size: int
    axes: tuple[Axis, ...] = ()

    def __post_init__(self) -> None:
        axes = tuple(sorted(self.axes))
        object.__setattr__(self, "axes", axes)
        if self.world_size < 1:
            raise ValueError(f"a world needs at least one rank, got {self.world_size}")
        for a in axes:
            if a.stride < 1 or a.size < 2 or self.world_size % a.block:
                raise ValueError(f"a folded axis must have a stride >= 1 and a size >= 2 whose product divides "
                                 f"the world of {self.world_size}: got {a}")
        for a, b in zip(axes, axes[1:]):
            if b.stride % a.block:
                raise ValueError(f"folded axes must nest (each block within the next stride): {a} and {b}")

    @staticmethod
    def everyone(world_size: int) -> "RankSymmetry":
        return RankSymmetry(world_size)

    @staticmethod
    def folded(world_size: int) -> "RankSymmetry":
        """Every rank folded onto rank 0 (where a launch with representative ranks starts)."""
        return RankSymmetry(world_size, (Axis(1, world_size),) if world_size > 1 else ())

    @property
    def mirrored(self) -> bool:
        return bool(self.axes)

    @property
    def copies(self) -> int:
        """How many ranks each representative stands for (itself included)."""
        return math.prod(a.size for a in self.axes)

    @property
    def processes(self) -> int:
        return self.world_size // self.copies

    @property
    def representatives(self) -> tuple[int, ...]:
        return tuple(r for r in range(self.world_size) if self.is_representative(r))

    def is_representative(self, rank: int) -> bool:
        return all(a.coordinate(rank) == 0 for a in self.axes)

    def representative(self, rank: int) -> int:
        return rank - sum(a.coordinate(rank) * a.stride for a in self.axes)

    def mirrors(self, rank: int) -> tuple[int, ...]:
        """The ranks `rank` stands for, itself first."""
        return tuple(self._translated(rank, ks) for ks in self._translations(self.axes))

    def is_invariant(self, group: tuple[int, ...], axis: Axis) -> bool:
        return {axis.shift(r, 1) for r in group} == set(group)

    def is_local(self, group: tuple[int, ...], axis: Axis) -> bool:
        return all(axis.coordinate(r) == 0 for r in group)

    def admits(self, group: tuple[int, ...], *, whole: bool = False) -> bool:
        """Whether a group fits the folding; `whole`: a transfer or a real backend's group, all of whose
        members must run."""
        if whole:
            return all(self.is_representative(r) for r in group)
        return all(self.is_local(group, a) or self.is_invariant(group, a) for a in self.axes)

    def copied_along(self, group: tuple[int, ...]) -> tuple[Axis, ...]:
        """The folded axes along which an admitted group has copies on the mirrors."""
        return tuple(a for a in self.axes if not self.is_invariant(group, a))

    def images(self, group: tuple[int, ...]) -> list[tuple[int, ...]]:
        """An admitted group's copies on the mirrors, in a fixed order (each as ordered as the group)."""
        along = self.copied_along(group)
        return [tuple(self._translated(r, ks, along) for r in group) for ks in self._translations(along)][1:]

    def _translations(self, axes: tuple[Axis, ...]):
        return itertools.product(*(range(a.size) for a in axes))

    def _translated(self, rank: int, ks: tuple[int, ...], axes: tuple[Axis, ...] | None = None) -> int:
        for a, k in zip(self.axes if axes is None else axes, ks):
            rank = a.shift(rank, k)
        return rank

    def to_json(self) -> list[list[int]]:
        return [[a.stride, a.size] for a in self.axes]

    @staticmethod
    def from_json(world_size: int, axes: list[list[int]]) -> "RankSymmetry":
        return RankSymmetry(world_size, tuple(Axis(s, n) for s, n in axes))


@dataclass(frozen=True, slots=True)
class UsedGroup:
    """A group a rank built or used: its global ranks and whether all its members must run."""

    ranks: tuple[int, ...]
    whole: bool = False


def placement(group: tuple[int, ...], gpus_per_node: int, gpus_per_leaf: int) -> tuple[tuple[int, int, int], ...]:
    """Where a group's members sit, relative to its first: (GPU in its node, node, leaf switch). A copy with
    the same placement crosses NVLink, NICs and leaves as its group does, on other rails where the GPUs in
    their nodes differ by a constant; a path across spines may take other spines (ECMP hashes the NICs),
    so there the copy's timing is a statistical, not an exact, image of its group's."""
    first = group[0]
    return tuple((r % gpus_per_node - first % gpus_per_node, r // gpus_per_node - first // gpus_per_node,
                  r // gpus_per_leaf - first // gpus_per_leaf) for r in group)


def best_symmetry(world_size: int, groups: list[UsedGroup], *, gpus_per_node: int,
                  gpus_per_leaf: int) -> RankSymmetry:
    """The folding that admits every group, whose copies sit as their groups do, and runs the fewest
    processes (ties: the fewest axes, then the smallest strides). Candidate axes: the whole world and
    every axis a group spans."""
    candidates = {Axis(1, world_size)} if world_size > 1 else set()
    candidates |= {a for g in groups if (a := Axis.of(g.ranks)) is not None and world_size % a.block == 0}
    best = RankSymmetry.everyone(world_size)
    for count in range(1, len(candidates) + 1):
        for axes in itertools.combinations(sorted(candidates), count):
            try:
                symmetry = RankSymmetry(world_size, axes)
            except ValueError:
                continue  # not nested
            if symmetry.processes < best.processes and _fits(symmetry, groups, gpus_per_node, gpus_per_leaf):
                best = symmetry
    return best


def _fits(symmetry: RankSymmetry, groups: list[UsedGroup], gpus_per_node: int, gpus_per_leaf: int) -> bool:
    for g in groups:
        if not symmetry.admits(g.ranks, whole=g.whole):
            return False
        where = placement(g.ranks, gpus_per_node, gpus_per_leaf)
        if any(placement(image, gpus_per_node, gpus_per_leaf) != where for image in symmetry.images(g.ranks)):
            return False
    return True
