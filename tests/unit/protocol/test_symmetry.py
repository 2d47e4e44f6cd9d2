"""Which groups a folding of representative ranks admits, and the folding the launcher starts again with."""

import pytest

from phantora.protocol.symmetry import Axis, RankSymmetry, UsedGroup, best_symmetry

# TorchTitan's mesh order (pp, dp, tp) on 64 ranks: tp inside a node of 8, dp across nodes, pp outermost
TP, DP, PP = Axis(1, 8), Axis(8, 4), Axis(32, 2)


def group(rank: int, axis: Axis) -> tuple[int, ...]:
    return tuple(axis.shift(rank, k - axis.coordinate(rank)) for k in range(axis.size))


def test_a_group_is_admitted_along_each_folded_axis_where_it_is_invariant_or_local():
    s = RankSymmetry(64, (DP,))
    assert s.representatives == (*range(8), *range(32, 40))
    assert s.admits(tuple(range(64)))  # the world
    assert s.admits(group(3, DP)) and s.admits(group(3, TP)) and s.admits(group(3, PP))
    assert not s.admits((0, 1, 8, 9))  # neither: half a dp group
    assert s.admits((0, 32), whole=True) and not s.admits((0, 8), whole=True)  # a pipeline send; one to a mirror
    assert s.representative(8 * 3 + 32 + 5) == 37
    assert s.mirrors(5) == (5, 13, 21, 29)


def test_copies_follow_every_folded_axis_the_group_is_local_along():
    s = RankSymmetry(64, (TP, DP))
    assert s.copied_along(group(0, TP)) == (DP,) and s.images(group(0, TP))[0] == tuple(range(8, 16))
    assert s.images(group(0, DP)) and s.copied_along(group(0, DP)) == (TP,)
    assert len(s.images(group(0, PP))) == s.copies - 1 == 31
    assert s.images(tuple(range(64))) == []


def test_the_best_folding_runs_the_fewest_processes_whose_copies_sit_as_their_groups():
    used = [UsedGroup(group(0, g)) for g in (TP, DP, PP)]
    assert best_symmetry(64, used, gpus_per_node=8, gpus_per_leaf=64).processes == 1
    piped = used + [UsedGroup((0, 32), whole=True)]  # stage 0 sends to stage 1: both run
    assert best_symmetry(64, piped, gpus_per_node=8, gpus_per_leaf=64).axes == (TP, DP)
    assert best_symmetry(64, [UsedGroup(tuple(range(64)))], gpus_per_node=8, gpus_per_leaf=64).processes == 1
    # a 12-rank group on 8-GPU nodes: its copies would sit across a node boundary elsewhere
    odd = [UsedGroup(tuple(range(12))), UsedGroup(tuple(range(48)), whole=True)]
    assert best_symmetry(48, odd, gpus_per_node=8, gpus_per_leaf=48).processes == 48


def test_folded_axes_must_nest_and_divide_the_world():
    with pytest.raises(ValueError, match="nest"):
        RankSymmetry(64, (Axis(1, 8), Axis(4, 4)))
    with pytest.raises(ValueError, match="divides"):
        RankSymmetry(48, (Axis(1, 32),))
    assert RankSymmetry.from_json(64, RankSymmetry(64, (TP, DP)).to_json()) == RankSymmetry(64, (DP, TP))
