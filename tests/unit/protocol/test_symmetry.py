"""Which groups a period of representative ranks admits, and the refinement the launcher restarts at."""

import pytest

from phantora.protocol.symmetry import RankSymmetry, aligned_periods


def test_invariant_and_local_groups_are_admitted_and_others_are_not():
    s = RankSymmetry(16, 8)
    assert s.admits(tuple(range(16)))  # the world
    assert s.admits((3, 11))  # a data-parallel group: one rank per copy
    assert s.admits((0, 1, 2, 3))  # a tensor-parallel group among the representatives
    assert not s.admits((4, 5, 6, 7, 8, 9, 10, 11))  # straddles a representative and a mirror block
    assert not s.admits((3, 11), point_to_point=True)  # a transfer to a mirror
    assert s.admits((3, 5), point_to_point=True)


def test_images_are_the_local_group_shifted_by_each_period():
    s = RankSymmetry(12, 4)
    assert s.images((0, 1)) == [(4, 5), (8, 9)]
    assert s.images((0, 4, 8)) == []  # invariant: the collective already holds its copies
    assert RankSymmetry.everyone(4).images((0, 1)) == []


def test_refinement_takes_the_smallest_aligned_period_that_admits_the_group():
    one = RankSymmetry(64, 1)
    assert one.refined(tuple(range(64))) == one
    assert one.refined((0, 1, 2, 3, 4, 5, 6, 7)).period == 8
    # a 2-node shard group on 8-GPU nodes, 32 GPUs per leaf: 16 is a multiple of a node dividing a leaf
    aligned = aligned_periods(64, 8, 32)
    assert aligned == (1, 2, 4, 8, 16, 32, 64)
    assert RankSymmetry(64, 8).refined(tuple(range(16)), aligned=aligned).period == 16
    assert RankSymmetry(64, 8).refined((0, 40), point_to_point=True, aligned=aligned).period == 64
    # 16-GPU leaves: a 12-GPU block fits in one, repeated every leaf; a 24-GPU one spans two: every rank runs
    assert RankSymmetry(48, 4).refined(tuple(range(12)), aligned=aligned_periods(48, 8, 16)).period == 16
    assert RankSymmetry(48, 4).refined(tuple(range(24)), aligned=aligned_periods(48, 8, 16)).period == 48


@pytest.mark.parametrize("world,period", [(8, 3), (8, 0), (8, 9)])
def test_a_period_must_divide_the_world(world, period):
    with pytest.raises(ValueError, match="must divide"):
        RankSymmetry(world, period)
