"""The allocator's memory over simulated time, kept in bounded memory for `<out>/rank<N>/memory.json`.

Note: [Bounded memory samples]
The tracker takes a sample `(simulated ns, device, allocated bytes, reserved bytes)` after every
allocator change: about 3,000 per training step of a small Llama, ~0.5 MB of Python tuples, for
the whole run, in every rank (rank processes must stay small). `memory.json` keeps at most
2,000 points anyway (`runtime.rank_result.downsample_memory`, each the maximum of its time bucket).
So on reaching `limit` samples, samples of one device in the same time bucket of `width_ns` merge
into one (the bucket's last time, its largest allocated and reserved bytes), the bucket doubling in
width until at most half the limit remain; widths only double, so a merged point never straddles
a later, wider bucket. Peaks survive exactly; a point's time moves by less than a
bucket, about 1/2000 of the time covered so far, the same order as memory.json's own buckets.
Runs with fewer than `limit` samples are kept exactly.
"""

from __future__ import annotations

from typing import Iterator

MemorySample = tuple[int, int, int, int]
"""(simulated ns, device index, allocated bytes, reserved bytes)."""


class MemorySamples:
    """An append-only, time-ordered list of allocator samples that compacts itself (Note above)."""

    __slots__ = ("limit", "width_ns", "_samples")

    def __init__(self, limit: int = 8192) -> None:
        if limit < 4:
            raise ValueError(f"limit must be at least 4, got {limit}")
        self.limit = limit
        self.width_ns = 1
        """The time bucket samples were last merged into (1: not merged yet)."""
        self._samples: list[MemorySample] = []

    def append(self, sample: MemorySample) -> None:
        self._samples.append(sample)
        if len(self._samples) >= self.limit:
            self._compact()

    def __iter__(self) -> Iterator[MemorySample]:
        return iter(self._samples)

    def __len__(self) -> int:
        return len(self._samples)

    def _compact(self) -> None:
        samples = self._samples
        span_ns = samples[-1][0] - samples[0][0]
        width = self.width_ns  # grows by doubling only, so earlier buckets nest in the new ones
        while width * (self.limit // 2) <= span_ns:
            width *= 2
        while True:
            merged: dict[tuple[int, int], MemorySample] = {}
            for t, d, a, r in samples:
                key = (d, t // width)
                old = merged.get(key)
                merged[key] = (t, d, max(a, old[2]), max(r, old[3])) if old else (t, d, a, r)
            if len(merged) <= self.limit // 2:
                break
            width *= 2
        self.width_ns = width
        self._samples = sorted(merged.values(), key=lambda s: (s[0], s[1]))
