"""Bounded memory samples in every rank (runtime/memory_samples.py), and memory.json drawn from them
(runtime/rank_result.py): part of what keeps simulating many ranks cheap (docs/launcher.md, "Scale")."""

from phantora.runtime.rank_result import downsample_memory
from phantora.runtime.memory_samples import MemorySamples


def _sawtooth(n: int, devices: int = 1) -> list[tuple[int, int, int, int]]:
    """n samples 1 µs apart: allocated ramps 0..99 and drops, reserved grows; one spike at n // 3."""
    return [(10**3 * i, i % devices, (10**6 if i == n // 3 else i % 100), i) for i in range(n)]


def test_few_samples_are_kept_exactly():
    samples = _sawtooth(1000)
    kept = MemorySamples(limit=1024)
    for s in samples:
        kept.append(s)
    assert list(kept) == samples and kept.width_ns == 1


def test_many_samples_stay_bounded_and_keep_their_peaks():
    limit, samples = 256, _sawtooth(100_000, devices=2)
    kept = MemorySamples(limit=limit)
    for s in samples:
        kept.append(s)
        assert len(kept) < limit
    points = list(kept)
    assert points == sorted(points)
    for device in (0, 1):
        mine = [p for p in points if p[1] == device]
        assert max(p[2] for p in mine) == max(s[2] for s in samples if s[1] == device)  # the spike (device 0)
        assert max(p[3] for p in mine) == max(s[3] for s in samples if s[1] == device)
        assert mine[-1][0] == max(s[0] for s in samples if s[1] == device)  # the end stays the end
    # merged points are exact merges of whole buckets: merging further gives what merging the samples gives
    assert kept.width_ns > 1
    assert _merge(points, kept.width_ns) == _merge(samples, kept.width_ns)
    assert _merge(points, 4 * kept.width_ns) == _merge(samples, 4 * kept.width_ns)


def _merge(samples, width: int) -> dict:
    """Per (device, time bucket): the last time, the largest allocated and reserved bytes."""
    merged = {}
    for t, d, a, r in samples:
        old = merged.get((d, t // width))
        merged[(d, t // width)] = (t, max(a, old[1]), max(r, old[2])) if old else (t, a, r)
    return merged


def test_memory_json_keeps_the_peak_from_compacted_samples():
    samples = _sawtooth(50_000)
    kept = MemorySamples(limit=512)
    for s in samples:
        kept.append(s)
    exact, bounded = downsample_memory(samples, buckets=100), downsample_memory(kept, buckets=100)
    assert max(bounded["allocated_bytes"]) == max(exact["allocated_bytes"]) == 10**6
    assert bounded["reserved_bytes"][-1] == exact["reserved_bytes"][-1]
    assert abs(len(bounded["time_s"]) - len(exact["time_s"])) <= 2



def test_one_device_merges_as_several_devices_do(monkeypatch):
    """A rank with one device merges runs of samples in one pass (Note [Bounded memory samples]); the points
    are the general merge's, also where several samples share a time."""
    from phantora.runtime import memory_samples

    samples, t = [], 0
    for i in range(20_000):
        t += (i * 7919) % 5 * 300  # steps of 0-1200 ns, many of them 0
        samples.append((t, 0, (i * 104729) % 1000, i // 10))
    for width in (1, 3, 1024, 10**5):
        assert memory_samples._merge_runs(samples, width) == memory_samples._merge(samples, width)
    one_pass = MemorySamples(limit=300)
    for s in samples:
        one_pass.append(s)
    monkeypatch.setattr(memory_samples, "_merge_runs", memory_samples._merge)
    general = MemorySamples(limit=300)
    for s in samples:
        general.append(s)
    assert one_pass.width_ns == general.width_ns > 1
    assert list(one_pass) == list(general)
