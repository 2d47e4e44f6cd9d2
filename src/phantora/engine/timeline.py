"""The streams of the simulated GPUs one process drives, and that process's host clock.

Note: [Host runs ahead]
As on real hardware, launching a kernel costs the host only its launch overhead; the kernel
starts on its stream once the host has launched it and the stream's earlier work is done.
The host waits only where a real program would block (synchronize, `.item()`, a D2H copy,
`Event.synchronize`). Streams are FIFO; `wait_until` on a stream (from an event or
`wait_stream`) delays everything launched on it afterwards. Independent streams overlap.

All times are integer nanoseconds of simulated time (`SimTime`). Nothing here reads a real
clock, so the same sequence of calls always gives the same times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from phantora.units import SimTime


StreamKey = tuple[int, int]
"""(device index, stream id); stream id 0 is the device's default stream."""


@dataclass(frozen=True, slots=True)
class KernelSpan:
    """A kernel placed on a stream: what ran, where, and when."""

    name: str
    stream: StreamKey
    launch_ns: SimTime
    start_ns: SimTime
    end_ns: SimTime
    flops: float
    bytes_moved: float
    kernel_class: str


@dataclass(slots=True)
class Timeline:
    """FIFO stream timelines of a process's GPUs plus the host clock that launches onto them."""

    launch_latency_ns: SimTime = SimTime(0)
    """Time from the host's launch call to the earliest moment the kernel can start."""
    host_ns: SimTime = SimTime(0)
    _stream_tail_ns: dict[StreamKey, SimTime] = field(default_factory=dict)
    spans: list[KernelSpan] = field(default_factory=list)
    host_blocked_ns: SimTime = SimTime(0)
    """Total time the host spent waiting for the GPU."""

    def advance_host(self, duration_ns: int) -> None:
        """The host spends `duration_ns` of CPU time (dispatch, launch, user code, sleep)."""
        assert duration_ns >= 0, duration_ns
        self.host_ns = SimTime(self.host_ns + duration_ns)

    def stream_tail(self, stream: StreamKey) -> SimTime:
        """When everything launched on `stream` so far has finished."""
        return self._stream_tail_ns.get(stream, SimTime(0))

    def device_tail(self, device: int) -> SimTime:
        """When everything launched on any stream of `device` so far has finished."""
        return max((t for (d, _), t in self._stream_tail_ns.items() if d == device), default=SimTime(0))

    def launch(self, stream: StreamKey, duration_ns: int, *, name: str = "", flops: float = 0.0,
               bytes_moved: float = 0.0, kernel_class: str = "other") -> KernelSpan:
        """Enqueue a kernel on `stream` at the current host time; returns where it landed."""
        assert duration_ns >= 0, duration_ns
        earliest = self.host_ns + self.launch_latency_ns
        start = SimTime(max(earliest, self.stream_tail(stream)))
        end = SimTime(start + duration_ns)
        self._stream_tail_ns[stream] = end
        span = KernelSpan(name, stream, self.host_ns, start, end, flops, bytes_moved, kernel_class)
        self.spans.append(span)
        return span

    def wait_until(self, stream: StreamKey, ready_ns: SimTime) -> None:
        """Work launched on `stream` from now on starts no earlier than `ready_ns` (event wait)."""
        self._stream_tail_ns[stream] = SimTime(max(self.stream_tail(stream), ready_ns))

    def block_host_until(self, ready_ns: SimTime) -> None:
        """The host blocks until `ready_ns` (synchronize, `.item()`, blocking copy)."""
        if ready_ns > self.host_ns:
            self.host_blocked_ns = SimTime(self.host_blocked_ns + ready_ns - self.host_ns)
            self.host_ns = ready_ns

    def synchronize_stream(self, stream: StreamKey) -> None:
        self.block_host_until(self.stream_tail(stream))

    def synchronize_device(self, device: int) -> None:
        self.block_host_until(self.device_tail(device))

    def busy_ns(self, device: int, until_ns: SimTime | None = None) -> SimTime:
        """Time during which at least one kernel ran on `device` (overlapping streams count once)."""
        return union_length(((s.start_ns, s.end_ns) for s in self.spans if s.stream[0] == device), until_ns)


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
