"""Interval arithmetic on simulated time."""

from __future__ import annotations

from typing import Iterable

from phantora.units import SimTime


def union_length(intervals: Iterable[tuple[int, int]], until_ns: int | None = None) -> SimTime:
    """Total length covered by `[start, end)` intervals (overlaps count once), clipped at `until_ns`."""
    total, cursor = 0, 0
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if until_ns is not None:
            end = min(end, until_ns)
        start = max(start, cursor)
        if end > start:
            total += end - start
            cursor = end
    return SimTime(total)
