"""Where each rank's simulated time went, from the coordinator's placed work (pure; no I/O).

Per rank: the union of its kernels (compute), the union of its NCCL calls (communication, from the
moment its stream reached the call, spin-wait for late peers included, as a profiler shows NCCL
kernels), the part of communication no compute overlaps (exposed: what overlapping would save),
the spin-wait alone (each call's network start minus its member start), and host time blocked in
synchronizations. Intervals are half-open [start, end) in integer nanoseconds.

Note: [The program's own sleep]
A program may sleep (`time.sleep`): TorchTitan's rank 0 sleeps 2 s after its last step "for other ranks to
complete". That host time is neither GPU work nor a GPU waiting for work the program has, so it must not
read as idle GPUs: while every rank sleeps or has ended, and no GPU runs anything, the run is asleep
(`asleep_intervals`). The summary still counts the simulated time whole (the program does take that long),
says how much of it the run slept, and gives GPU busy, TFLOP/s and MFU over the rest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol

from phantora.engine.coordinator import HostWait, Span
from phantora.models.power import GpuPower

Interval = tuple[int, int]


class CoordinatorState(Protocol):
    """The queries of engine.coordinator.Coordinator the reports use."""

    world_size: int
    representatives: tuple[int, ...]
    """The ranks that have timelines: every rank, or the representatives (protocol/symmetry.py)."""
    clock_factor: float
    """Every GPU's GEMMs and attention at this many times their time: the job's slowest chip
    (models/chip_variation.py)."""

    def spans(self, rank: int, stream_id: int | None = None) -> list[Span]: ...

    def stream_ids(self, rank: int) -> list[int]: ...

    def host_waits(self, rank: int) -> list[HostWait]: ...

    def host_ns(self, rank: int) -> int: ...

    def host_sleeps(self, rank: int) -> list[tuple[int, int]]: ...

    def power(self, rank: int) -> GpuPower | None: ...


def merge(intervals: Iterable[Interval], *, gap_ns: int = 0) -> list[Interval]:
    """Sorted, disjoint union; intervals closer than `gap_ns` are joined (0: only touching ones)."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1] + gap_ns:
            if end > merged[-1][1]:
                merged[-1][1] = end
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def length(merged: list[Interval]) -> int:
    return sum(e - s for s, e in merged)


def intersection(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Intersection of two merged interval lists (two-pointer sweep)."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def is_nccl(span: Span) -> bool:
    return bool(span.collectives) or span.kernel_class == "nccl"


def network_start_ns(span: Span) -> int:
    """When the first of an NCCL call's operations started on the network (its member start if none)."""
    return min((c.start_ns for c in span.collectives), default=span.start_ns)


@dataclass(frozen=True, slots=True)
class RankTimeline:
    """One rank's busy intervals by kind, merged."""

    compute: list[Interval]
    communication: list[Interval]
    exposed_communication: list[Interval]
    host_blocked: list[Interval]
    sleeps: list[Interval]
    """The program's own sleeps (Note [The program's own sleep])."""


@dataclass(frozen=True, slots=True)
class RankBreakdown:
    """Totals of one rank; times in ns."""

    rank: int
    end_ns: int
    """When the rank's last work ended: its final host clock or its last stream's tail."""
    busy_ns: int
    compute_ns: int
    nccl_ns: int
    exposed_comm_ns: int
    nccl_wait_ns: int
    """Time NCCL kernels spun waiting for peers to arrive (summed over calls)."""
    host_blocked_ns: int
    sleep_ns: int
    """Host time the rank's program spent in its own sleeps (Note [The program's own sleep])."""
    kernels: int
    nccl_calls: int
    flops: float
    kernel_ns_by_class: dict[str, int] = field(default_factory=dict)
    """Kernel time by the cost model's class ("nccl" for NCCL calls; "other" when unclassified)."""


def rank_timeline(state: CoordinatorState, rank: int, *, gap_ns: int = 0) -> RankTimeline:
    spans = state.spans(rank)
    compute = merge(((s.start_ns, s.end_ns) for s in spans if not is_nccl(s)), gap_ns=gap_ns)
    comm = merge(((s.start_ns, s.end_ns) for s in spans if is_nccl(s)), gap_ns=gap_ns)
    exposed = subtract(comm, intersection(comm, compute))
    blocked = merge(((w.from_ns, w.until_ns) for w in state.host_waits(rank)), gap_ns=gap_ns)
    return RankTimeline(compute, comm, exposed, blocked, merge(state.host_sleeps(rank), gap_ns=gap_ns))


def subtract(a: list[Interval], covered: list[Interval]) -> list[Interval]:
    """a minus covered, where covered is a merged subset of a."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        cursor = start
        while j < len(covered) and covered[j][0] < end:
            c_start, c_end = covered[j]
            if c_start > cursor:
                out.append((cursor, c_start))
            cursor = max(cursor, c_end)
            if c_end <= end:
                j += 1
            else:
                break
        if cursor < end:
            out.append((cursor, end))
    return out


def rank_breakdown(state: CoordinatorState, rank: int, *, host_end_ns: int = 0) -> RankBreakdown:
    """`host_end_ns`: the rank's own host clock at exit, when it reported one (may exceed the coordinator's)."""
    spans = state.spans(rank)
    timeline = rank_timeline(state, rank)
    by_class: Counter = Counter()
    kernels = calls = 0
    flops = 0.0
    wait_ns = 0
    for s in spans:
        if is_nccl(s):
            calls += 1
            wait_ns += network_start_ns(s) - s.start_ns
            by_class["nccl"] += s.end_ns - s.start_ns
        else:
            kernels += 1
            flops += s.flops
            by_class[s.kernel_class or "other"] += s.end_ns - s.start_ns
    end_ns = max([state.host_ns(rank), host_end_ns] + [s.end_ns for s in spans])
    busy = merge(timeline.compute + timeline.communication)
    return RankBreakdown(
        rank=rank, end_ns=end_ns, busy_ns=length(busy), compute_ns=length(timeline.compute),
        nccl_ns=length(timeline.communication), exposed_comm_ns=length(timeline.exposed_communication),
        nccl_wait_ns=wait_ns, host_blocked_ns=length(timeline.host_blocked),
        sleep_ns=length(timeline.sleeps), kernels=kernels, nccl_calls=calls, flops=flops,
        kernel_ns_by_class=dict(by_class))


def asleep_intervals(state: CoordinatorState, ends_ns: Mapping[int, int], until_ns: int) -> list[Interval]:
    """When the run slept (Note [The program's own sleep]): every rank asleep or ended (rank r at `ends_ns[r]`,
    for each rank that ran) and no GPU busy, within [0, until_ns)."""
    asleep: list[Interval] = [(0, until_ns)]
    for rank, end_ns in ends_ns.items():
        resting = merge(state.host_sleeps(rank) + [(end_ns, until_ns)])
        asleep = intersection(asleep, resting)
        if not asleep:
            return []
    busy = merge((s.start_ns, s.end_ns) for rank in ends_ns for s in state.spans(rank))
    return subtract(asleep, intersection(asleep, busy))
