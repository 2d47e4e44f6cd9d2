"""Units. Simulated time is an integer number of nanoseconds everywhere inside Phantora."""

from typing import NewType

SimTime = NewType("SimTime", int)
"""A point or span of simulated time, in integer nanoseconds."""

NS_PER_S = 1_000_000_000
GiB = 1024**3


def seconds_to_ns(seconds: float) -> int:
    """Round seconds to the nearest nanosecond (never truncate: sub-µs kernels must not become free)."""
    return int(round(seconds * NS_PER_S))
