"""Max-min fair sharing (flows.py) against allocations worked out by hand."""

import random

import numpy as np
import pytest

from phantora.models.network.flows import FlowShape, max_min_rates

INF = float("inf")


def shape(**links: int) -> FlowShape:
    """shape(l0=1, l2=2): link 0 once, link 2 twice."""
    return FlowShape.from_link_counts({int(k[1:]): v for k, v in links.items()})


def test_two_flows_on_one_link_get_half_each():
    rates = max_min_rates(np.array([10.0]), [shape(l0=1), shape(l0=1)], np.array([INF, INF]))
    assert rates.tolist() == [5.0, 5.0]


def test_three_flow_max_min_by_hand():
    # L0 = 10, L1 = 20. A: L0; B: L0+L1; C: L1.
    # Fill: L0's share 10/2 = 5 < L1's 20/2 = 10 -> A, B frozen at 5. L1 has 15 left for C alone.
    caps = np.array([10.0, 20.0])
    rates = max_min_rates(caps, [shape(l0=1), shape(l0=1, l1=1), shape(l1=1)], np.full(3, INF))
    assert rates.tolist() == [5.0, 5.0, 15.0]


def test_multiplicity_counts_each_subflow():
    # A ring-like coflow crossing link 0 twice shares it with a single flow: 3 shares of 30 -> 10 each.
    rates = max_min_rates(np.array([30.0]), [shape(l0=2), shape(l0=1)], np.full(2, INF))
    assert rates.tolist() == [10.0, 10.0]


def test_rate_cap_frees_bandwidth_for_others():
    rates = max_min_rates(np.array([10.0]), [shape(l0=1), shape(l0=1)], np.array([2.0, INF]))
    assert rates.tolist() == [2.0, 8.0]


def test_flow_limited_by_its_tightest_link():
    caps = np.array([100.0, 7.0, 100.0])
    rates = max_min_rates(caps, [shape(l0=1, l1=1, l2=1)], np.array([INF]))
    assert rates.tolist() == [7.0]


def test_no_flows():
    assert max_min_rates(np.array([1.0]), [], np.array([])).size == 0


def test_bit_identical_under_permutation_and_split_into_components():
    rng = random.Random(7)
    caps = np.array([rng.uniform(1e9, 5e11) for _ in range(40)])
    shapes, fcaps = [], []
    for _ in range(60):
        links = rng.sample(range(40), rng.randint(1, 5))
        shapes.append(FlowShape.from_link_counts({l: rng.randint(1, 4) for l in links}))
        fcaps.append(rng.choice([INF, rng.uniform(1e9, 1e11)]))
    base = max_min_rates(caps, shapes, np.array(fcaps))
    for seed in range(10):
        order = list(range(len(shapes)))
        random.Random(seed).shuffle(order)
        perm = max_min_rates(caps, [shapes[i] for i in order], np.array([fcaps[i] for i in order]))
        assert [perm[order.index(i)] for i in range(len(shapes))] == base.tolist()
    # Two disjoint halves computed separately give the same bits as together.
    left = [FlowShape.from_link_counts({l: 1 for l in rng.sample(range(20), 3)}) for _ in range(10)]
    right = [FlowShape.from_link_counts({l: 1 for l in rng.sample(range(20, 40), 3)}) for _ in range(10)]
    together = max_min_rates(caps, left + right, np.full(20, INF))
    apart = np.concatenate([max_min_rates(caps, left, np.full(10, INF)), max_min_rates(caps, right, np.full(10, INF))])
    assert together.tolist() == apart.tolist()


def test_allocation_is_feasible_and_max_min():
    """Every flow is bottlenecked: it hits its cap, or crosses a full link on which it has a maximal rate."""
    rng = random.Random(3)
    caps = np.array([rng.uniform(1, 100) for _ in range(15)])
    shapes = [FlowShape.from_link_counts({l: rng.randint(1, 3) for l in rng.sample(range(15), rng.randint(1, 4))})
              for _ in range(25)]
    fcaps = np.array([rng.choice([INF, rng.uniform(1, 20)]) for _ in range(25)])
    rates = max_min_rates(caps, shapes, fcaps)
    load = np.zeros(15)
    for s, r in zip(shapes, rates):
        np.add.at(load, s.link_ids, s.weights * r)
    assert np.all(load <= caps * (1 + 1e-9))
    for i, (s, r) in enumerate(zip(shapes, rates)):
        if r >= fcaps[i] * (1 - 1e-9):
            continue
        full = [l for l in s.link_ids.tolist() if load[l] >= caps[l] * (1 - 1e-9)]
        assert full, f"flow {i} is not bottlenecked"
        assert any(all(rates[j] <= r * (1 + 1e-9) for j, t in enumerate(shapes) if l in t.link_ids.tolist())
                   for l in full)


def test_flow_shape_rejects_non_integer_weights():
    with pytest.raises(AssertionError):
        FlowShape(np.array([0]), np.array([1.5]))
