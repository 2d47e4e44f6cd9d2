"""Chip variation: the expected slowest of N chips (models/chip_variation.py Note [Chip variation])."""

from __future__ import annotations

import pytest

from phantora.models.chip_variation import UNIFORM_CHIPS, ChipVariation, expected_largest_normal


@pytest.mark.parametrize(("n", "expected"), [(1, 0.0), (2, 0.5642), (3, 0.8463), (4, 1.0294), (8, 1.4236),
                                             (10, 1.5388), (100, 2.5076)])
def test_the_expected_largest_of_n_normal_draws_is_the_tabulated_one(n, expected):
    # Tippett (1925) / Harter (1961) tables of expected normal order statistics
    assert expected_largest_normal(n) == pytest.approx(expected, abs=1e-4)


def test_one_gpu_runs_at_the_mean_chips_pace_and_more_gpus_at_a_slower_one():
    chips = ChipVariation(clock_sigma=0.011)
    paces = [chips.slowest_of(n) for n in (1, 2, 8, 128, 1024)]
    assert paces[0] == 1.0
    assert paces == sorted(paces) and len(set(paces)) == len(paces)
    assert paces[-1] == pytest.approx(1 + 0.011 * 3.2482, rel=1e-4)
    assert UNIFORM_CHIPS.slowest_of(1024) == 1.0


@pytest.mark.parametrize("sigma", [-0.01, 0.5])
def test_an_impossible_spread_is_refused(sigma):
    with pytest.raises(ValueError, match="clock_sigma"):
        ChipVariation(clock_sigma=sigma)
