"""Max-min fair bandwidth sharing between flows over capacitated links (progressive filling).

A *flow* here is a coflow: a set of subflows that move in lockstep at one common rate `r` (a ring
all-reduce's n sends, or one point-to-point send). It crosses each link `l` with an integer multiplicity
`w_l` (how many of its subflows use `l`), so it consumes `w_l * r` of the link; it may also have its own
rate cap (protocol/kernel efficiency). The allocation is the unique max-min fair one: raise every
unfrozen flow's rate together; when a link fills or a flow hits its cap, freeze the flows it limits.

Note: [Bit-exact progressive filling]
The result must not depend on the order flows are listed in (the simulator's answer must be identical
whatever order the coordinator learned about them). Every floating-point operation below is either
elementwise, a min, or a sum of integer-valued weights (exact in float64); a link's residual is only
ever reduced by `level * (integer sum of weights frozen at that level)`. So any permutation of the
flows gives bit-identical rates, and computing two disconnected groups of flows separately gives the
same bits as computing them together (the simulator relies on this to recompute only the flows that
share links, transitively, with the ones that changed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class FlowShape:
    """The links one coflow uses: link ids (sorted, unique) and how many of its subflows cross each."""

    link_ids: np.ndarray
    """int64, sorted, unique."""
    weights: np.ndarray
    """float64 holding small positive integers (subflow multiplicity per link)."""

    def __post_init__(self) -> None:
        assert self.link_ids.ndim == 1 and self.link_ids.shape == self.weights.shape
        assert self.link_ids.size == 0 or bool(np.all(np.diff(self.link_ids) > 0))
        assert bool(np.all(self.weights >= 1)) and bool(np.all(self.weights == np.round(self.weights)))

    @staticmethod
    def from_link_counts(counts: dict[int, int]) -> "FlowShape":
        ids = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
        w = np.fromiter((counts[i] for i in ids.tolist()), dtype=np.float64, count=len(counts))
        return FlowShape(ids, w)


def max_min_rates(
    capacities_bytes_per_s: np.ndarray,
    shapes: list[FlowShape],
    caps_bytes_per_s: np.ndarray,
) -> np.ndarray:
    """Max-min fair rate of each flow (bytes/s per subflow). `caps_bytes_per_s[i]` may be `inf`.

    Cost: O(levels x incidences), where levels is the number of distinct bottleneck rates (small for
    the symmetric traffic of training jobs)."""
    n = len(shapes)
    rates = np.zeros(n, dtype=np.float64)
    if n == 0:
        return rates
    caps = np.asarray(caps_bytes_per_s, dtype=np.float64)
    assert caps.shape == (n,) and bool(np.all(caps > 0))
    sizes = np.fromiter((s.link_ids.size for s in shapes), dtype=np.int64, count=n)
    if sizes.sum() == 0:
        return caps.copy()
    inc_flow = np.repeat(np.arange(n, dtype=np.int64), sizes)
    inc_link_global = np.concatenate([s.link_ids for s in shapes])
    inc_w = np.concatenate([s.weights for s in shapes])
    if inc_link_global.size * 4 >= capacities_bytes_per_s.size:  # dense: index the cluster's links directly
        links, inc_link = np.arange(capacities_bytes_per_s.size), inc_link_global
    else:  # a few flows in a large cluster: number only the links they touch (same bits, less to scan per level)
        links, inc_link = np.unique(inc_link_global, return_inverse=True)
    residual = capacities_bytes_per_s[links].astype(np.float64, copy=True)
    wsum = np.bincount(inc_link, weights=inc_w, minlength=links.size)
    frozen = np.zeros(n, dtype=bool)
    inc_alive = np.ones(inc_flow.size, dtype=bool)

    while not frozen.all():
        active = wsum > 0
        share = np.full(links.size, np.inf)
        np.divide(residual, wsum, out=share, where=active)
        unfrozen_caps = np.where(frozen, np.inf, caps)
        level = min(float(share.min()), float(unfrozen_caps.min()))
        assert level > 0 and np.isfinite(level), "max-min: a flow has no finite bottleneck"
        bottleneck = share <= level
        hit = np.zeros(n, dtype=bool)
        hit[inc_flow[inc_alive & bottleneck[inc_link]]] = True
        freeze = ~frozen & (hit | (unfrozen_caps <= level))
        rates[freeze] = level
        frozen |= freeze
        newly = inc_alive & freeze[inc_flow]
        fw = np.bincount(inc_link[newly], weights=inc_w[newly], minlength=links.size)
        residual = np.maximum(residual - level * fw, 0.0)
        wsum = wsum - fw
        inc_alive &= ~newly
    return rates
