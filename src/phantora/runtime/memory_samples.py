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

A compaction runs every few thousand allocator changes, over every sample kept, so its cost per sample is
part of each op's. Samples are in time order, so a bucket's samples are adjacent: with one device (a rank's
usual case) one pass merges each run of equal buckets, with no dict, and leaves them in order (`_merge_runs`);
merging already merged samples again into wider buckets gives what merging the originals would (buckets nest,
maxima and last times compose), so a width that left too many points merges the merged list, not the
original. The result is the one the general merge gives (a test compares them).
"""

from __future__ import annotations

from typing import Iterator

MemorySample = tuple[int, int, int, int]
"""(simulated ns, device index, allocated bytes, reserved bytes)."""


class MemorySamples:
    """An append-only, time-ordered list of allocator samples that compacts itself (Note above)."""

    __slots__ = ("limit", "width_ns", "_samples", "_devices")

    def __init__(self, limit: int = 8192) -> None:
        if limit < 4:
            raise ValueError(f"limit must be at least 4, got {limit}")
        self.limit = limit
        self.width_ns = 1
        """The time bucket samples were last merged into (1: not merged yet)."""
        self._samples: list[MemorySample] = []
        self._devices: set[int] = set()
        """The devices sampled so far."""

    def append(self, sample: MemorySample) -> None:
        samples = self._samples
        samples.append(sample)
        if len(samples) >= self.limit:
            self._devices.update(s[1] for s in samples)
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
        merge = _merge_runs if len(self._devices) == 1 else _merge
        while True:
            samples = merge(samples, width)
            if len(samples) <= self.limit // 2:
                break
            width *= 2
        self.width_ns = width
        self._samples = samples


def _merge(samples: list[MemorySample], width: int) -> list[MemorySample]:
    """Samples of one device in the same bucket of `width` ns merged into one (the last time, the largest bytes),
    in time order."""
    merged: dict[tuple[int, int], MemorySample] = {}
    for t, d, a, r in samples:
        key = (d, t // width)
        old = merged.get(key)
        merged[key] = (t, d, max(a, old[2]), max(r, old[3])) if old else (t, d, a, r)
    return sorted(merged.values(), key=lambda s: (s[0], s[1]))


def _merge_runs(samples: list[MemorySample], width: int) -> list[MemorySample]:
    """`_merge` of time-ordered samples of a single device: each run of samples in one bucket becomes one."""
    merged: list[MemorySample] = []
    bucket = -1
    for sample in samples:
        t = sample[0]
        if t // width != bucket:
            bucket = t // width
            merged.append(sample)
            continue
        _, d, a, r = merged[-1]
        merged[-1] = (t, d, a if a > sample[2] else sample[2], r if r > sample[3] else sample[3])
    return merged
