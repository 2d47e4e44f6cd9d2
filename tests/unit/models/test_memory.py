"""Tests of the GPU memory model (phantora.models.memory).

Hand-derived answers for each allocator rule; the replay of real allocator behaviour recorded on an H200 is
in tests/calibration/test_memory_probe.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from phantora.models.memory import (
    CUDA_MALLOC_HEADROOM_BYTES,
    K_LARGE_BUFFER,
    OOM_DOCS_URL,
    AllocatorConfig,
    CachingAllocatorModel,
    SimulatedOutOfMemoryError,
    allocation_size,
    cublas_workspace_bytes,
    format_size,
    round_size,
)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

DEFAULT = AllocatorConfig()


def small_device(total: int = 10 * GiB, context: int = 1 * GiB, conf: str = "") -> CachingAllocatorModel:
    return CachingAllocatorModel(total, context, AllocatorConfig.parse(conf))


# ----------------------------------------------------------------------------- size rules


@pytest.mark.parametrize(
    ("nbytes", "rounded"),
    [(1, 512), (511, 512), (512, 512), (513, 1024), (1023, 1024), (MiB, MiB), (MiB + 1, MiB + 512)],
)
def test_round_size_default(nbytes: int, rounded: int) -> None:
    assert round_size(nbytes, DEFAULT) == rounded


@pytest.mark.parametrize(
    ("rounded", "segment"),
    [
        (512, 2 * MiB),
        (MiB, 2 * MiB),
        (MiB + 512, 20 * MiB),
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),
        (10 * MiB + 512, 12 * MiB),
        (37_123_584, 36 * MiB),
    ],
)
def test_allocation_size(rounded: int, segment: int) -> None:
    assert allocation_size(rounded, DEFAULT) == segment


def test_roundup_power2_divisions_single_value() -> None:
    conf = AllocatorConfig.parse("roundup_power2_divisions:4")
    assert round_size(1200, conf) == 1536  # 1200 <= 512 * 4: plain rounding
    assert round_size(3000, conf) == 3072  # 2048 + 2 * 512
    assert round_size(700_000, conf) == 786_432  # 512 KiB + 2 * 128 KiB
    assert round_size(5 * MiB + 1, conf) == 6 * MiB
    assert round_size(4 * MiB, conf) == 4 * MiB  # a power of two stays


def test_roundup_power2_divisions_list() -> None:
    conf = AllocatorConfig.parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
    assert conf.roundup_power2_divisions[:9] == (1,) * 9
    assert conf.roundup_power2_divisions[9:11] == (2, 4)
    assert conf.roundup_power2_divisions[11:] == (8,) * 5
    assert round_size(600 * MiB + 1, conf) == 768 * MiB
    assert round_size(1536 * MiB + 1, conf) == 1792 * MiB
    assert round_size(3 * GiB + 1, conf) == 3 * GiB + 256 * MiB


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 bytes"),
        (1024, "1024 bytes"),
        (1025, "1.00 KiB"),
        (MiB, "1024.00 KiB"),
        (GiB, "1024.00 MiB"),
        (GiB + 1, "1.00 GiB"),
        (150_109_880_320, "139.80 GiB"),
    ],
)
def test_format_size(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


# ----------------------------------------------------------------------------- config


def test_config_parse_values() -> None:
    conf = AllocatorConfig.parse(
        " max_split_size_mb:128, garbage_collection_threshold:0.6,expandable_segments:False,"
        "release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
    )
    assert conf.max_split_size_bytes == 128 * MiB
    assert conf.garbage_collection_threshold == 0.6
    assert conf.expandable_segments is False
    assert conf.max_non_split_rounding_bytes == K_LARGE_BUFFER


def test_config_large_segment_sets_rounding_floor() -> None:
    conf = AllocatorConfig.parse("max_split_size_mb:64,large_segment_size_mb:32")
    assert conf.large_segment_size_bytes == 32 * MiB
    assert conf.max_non_split_rounding_bytes == 32 * MiB
    assert allocation_size(2 * MiB, conf) == 32 * MiB


def test_config_from_env_prefers_cuda_variable() -> None:
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:100", "PYTORCH_ALLOC_CONF": "max_split_size_mb:200"}
    assert AllocatorConfig.from_env(env).max_split_size_bytes == 100 * MiB
    assert AllocatorConfig.from_env({"PYTORCH_ALLOC_CONF": "max_split_size_mb:200"}).max_split_size_bytes == 200 * MiB
    assert AllocatorConfig.from_env({}) == AllocatorConfig()


@pytest.mark.parametrize(
    "bad",
    [
        "max_split_size_mb",
        "max_split_size_mb:",
        "max_split_size_mb:abc",
        "max_split_size_mb:10",  # below the 20 MiB large segment
        "max_split_size_mb:100;expandable_segments:True",
        "max_split_size_mb:100 expandable_segments:True",
        "no_such_option:1",
        "expandable_segments:yes",
        "garbage_collection_threshold:1.5",
        "roundup_power2_divisions:3",
        "roundup_power2_divisions:[256:3]",
        "roundup_power2_divisions:[300:2]",
        "roundup_power2_divisions:[256:2",
        "backend:magic",
        "pinned_num_register_threads:3",
        "large_segment_size_mb:8",
    ],
)
def test_config_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="PYTORCH_CUDA_ALLOC_CONF"):
        AllocatorConfig.parse(bad)


@pytest.mark.parametrize("conf", ["expandable_segments:True", "backend:cudaMallocAsync", "throw_on_cudamalloc_oom:True"])
def test_unemulated_options_raise(conf: str) -> None:
    with pytest.raises(NotImplementedError):
        small_device(conf=conf)


# ----------------------------------------------------------------------------- allocator rules


def test_zero_byte_allocation_touches_nothing() -> None:
    m = small_device()
    before = m.memory_stats()
    assert m.malloc(0) == 0
    m.free(0)
    assert m.memory_stats() == before


def test_small_pool_packs_2mib_segments() -> None:
    m = small_device()
    ptrs = [m.malloc(600_000) for _ in range(3)]  # 600064 B blocks: three fit in 2 MiB
    assert m.reserved_bytes == 2 * MiB
    assert m.allocated_bytes == 3 * 600_064
    ptrs.append(m.malloc(600_000))
    assert m.reserved_bytes == 4 * MiB
    stats = m.memory_stats()
    assert stats["segment.small_pool.current"] == 2
    assert stats["inactive_split_bytes.small_pool.current"] == (2 * MiB - 3 * 600_064) + (2 * MiB - 600_064)
    m.free(ptrs[1])
    m.empty_cache()  # neither segment is fully free
    assert m.reserved_bytes == 4 * MiB
    for p in (ptrs[0], ptrs[2], ptrs[3]):
        m.free(p)
    m.empty_cache()
    assert m.reserved_bytes == 0
    assert m.memory_stats()["num_device_free"] == 2


def test_small_split_keeps_a_512_byte_remainder() -> None:
    m = small_device()
    m.malloc(MiB)
    m.malloc(MiB - 512)  # leaves exactly kMinBlockSize: still split off
    assert m.allocated_bytes == 2 * MiB - 512
    m.malloc(1)  # served by the 512 B remainder
    assert (m.allocated_bytes, m.reserved_bytes) == (2 * MiB, 2 * MiB)


def test_large_split_needs_more_than_1mib_remainder() -> None:
    m = small_device()
    a = m.malloc(19 * MiB)  # 20 MiB segment, 1 MiB left: not > kSmallSize, so no split
    assert m.allocated_bytes == 20 * MiB
    m.free(a)
    b = m.malloc(18 * MiB)  # reuses it, 2 MiB left: split
    assert m.allocated_bytes == 18 * MiB
    assert m.memory_stats()["inactive_split_bytes.large_pool.current"] == 2 * MiB
    m.free(b)
    assert m.memory_stats()["inactive_split.all.current"] == 0


def test_free_merges_neighbours() -> None:
    m = small_device()
    a, b, c = (m.malloc(4 * MiB) for _ in range(3))  # one 20 MiB segment
    assert m.reserved_bytes == 20 * MiB
    m.free(b)
    s = m.memory_stats()
    assert s["inactive_split.all.current"] == 2  # the hole and the 8 MiB tail
    assert s["inactive_split_bytes.all.current"] == 12 * MiB
    m.free(a)  # merges with b's hole
    s = m.memory_stats()
    assert s["inactive_split.all.current"] == 2
    d = m.malloc(6 * MiB)  # best fit: the 8 MiB tail and the 8 MiB hole tie; the hole has the lower address
    assert d == a
    m.free(c)
    m.free(d)
    assert [b["size"] for b in m.snapshot()[0]["blocks"]] == [20 * MiB]


def test_best_fit_takes_smallest_sufficient_block() -> None:
    m = small_device()
    blocks = {n: m.malloc(n * MiB) for n in (12, 16, 30)}
    for p in blocks.values():
        m.free(p)
    assert m.malloc(13 * MiB) == blocks[16]
    assert m.malloc(11 * MiB) == blocks[12]
    assert m.reserved_bytes == 58 * MiB


def test_streams_have_separate_pools() -> None:
    m = small_device()
    a = m.malloc(40 * MiB, stream=7)
    m.free(a)
    b = m.malloc(40 * MiB, stream=0)
    assert b != a
    assert m.reserved_bytes == 80 * MiB
    assert m.malloc(40 * MiB, stream=7) == a


def test_record_stream_defers_reuse_until_stream_work_done() -> None:
    m = small_device()
    a = m.malloc(30 * MiB, stream=0)
    m.record_stream(a, 0)  # the allocation stream: ignored
    m.record_stream(a, 5)
    m.free(a)
    assert m.allocated_bytes == 0
    assert m.memory_stats()["active_bytes.all.current"] == 30 * MiB
    assert m.pending_event_streams() == {5}
    b = m.malloc(30 * MiB)  # a's block is still in use on stream 5
    assert b != a
    m.stream_work_done(6)  # another stream: no effect
    c = m.malloc(1000)
    assert m.memory_stats()["active_bytes.all.current"] == 30 * MiB + 30 * MiB + 1024
    m.stream_work_done(5)
    assert m.memory_stats()["active_bytes.all.current"] == 60 * MiB + 1024  # noticed only at next malloc
    d = m.malloc(30 * MiB)
    assert d == a
    assert m.pending_event_streams() == set()
    for p in (b, c, d):
        m.free(p)


def test_events_recorded_after_stream_done_stay_pending() -> None:
    m = small_device()
    a = m.malloc(30 * MiB)
    m.record_stream(a, 5)
    m.stream_work_done(5)  # before the free: the event recorded at free is newer
    m.free(a)
    m.malloc(1000)
    assert m.memory_stats()["active_bytes.all.current"] == 30 * MiB + 1024


def test_an_event_mark_completes_only_the_events_recorded_before_it() -> None:
    """A CUDA event recorded on stream 5 between two frees, then synchronized: the stream passed the first
    free's use, not necessarily the second's."""
    m = small_device()
    a, b = m.malloc(30 * MiB), m.malloc(40 * MiB)
    m.record_stream(a, 5)
    m.record_stream(b, 5)
    m.free(a)
    mark = m.event_mark
    m.free(b)
    m.stream_work_done(5, until=mark)
    assert m.malloc(30 * MiB) == a
    assert m.malloc(40 * MiB) != b
    assert m.pending_event_streams() == {5}


class EventLog:
    """An `EventProbe` that records what the allocator tells it and asks it."""

    def __init__(self, passed: int = 0) -> None:
        self.passed = passed
        self.recorded_events: list[tuple[int, int]] = []
        self.questions: list[tuple[int, list[int]]] = []
        self.retired_events: list[int] = []

    def recorded(self, stream: int, seq: int) -> None:
        self.recorded_events.append((stream, seq))

    def completed(self, stream: int, seqs: list[int]) -> int:
        self.questions.append((stream, list(seqs)))
        return max((seq for seq in seqs if seq <= self.passed), default=0)

    def retired(self, seq: int) -> None:
        self.retired_events.append(seq)


def test_an_allocation_that_misses_asks_the_probe_and_takes_the_block_the_gpu_released() -> None:
    """Note [Cross-stream frees between syncs]: a hit asks nothing; a miss asks for each stream with pending
    events, takes the blocks of the events passed, and asks nothing of them again."""
    m = small_device()
    probe = m.event_probe = EventLog(passed=1)
    m.free(m.malloc(1000))  # a cached small block
    a, b = m.malloc(30 * MiB), m.malloc(40 * MiB)
    m.record_stream(a, 5)
    m.record_stream(b, 6)
    m.free(a)
    m.free(b)
    assert probe.recorded_events == [(5, 1), (6, 2)]
    small = m.malloc(1000)  # a hit: nothing asked
    assert probe.questions == []
    assert m.malloc(30 * MiB) == a  # a miss: stream 5 passed event 1, stream 6 not event 2
    assert sorted(probe.questions) == [(5, [1]), (6, [2])]
    assert probe.retired_events == [1]
    assert m.pending_event_streams() == {6}
    probe.passed = 2
    reserved = m.reserved_bytes
    assert m.malloc(40 * MiB) == b and m.reserved_bytes == reserved
    assert probe.questions[-1] == (6, [2]) and probe.retired_events == [1, 2]
    m.free(small)


def test_without_a_probe_a_miss_reserves_a_new_segment() -> None:
    m = small_device()
    a = m.malloc(30 * MiB)
    m.record_stream(a, 5)
    m.free(a)
    assert m.malloc(30 * MiB) != a and m.reserved_bytes == 60 * MiB


def test_empty_cache_waits_for_pending_events() -> None:
    m = small_device()
    a = m.malloc(30 * MiB)
    m.record_stream(a, 3)
    m.free(a)
    m.empty_cache()
    assert m.reserved_bytes == 0
    assert m.memory_stats()["num_sync_all_streams"] == 1


def test_oom_message_and_counters() -> None:
    m = small_device(total=10 * GiB, context=1 * GiB)
    a = m.malloc(8 * GiB)
    with pytest.raises(SimulatedOutOfMemoryError) as err:
        m.malloc(2 * GiB)
    assert str(err.value) == (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 10.00 GiB of which "
        "1024.00 MiB is free. Including non-PyTorch memory, this process has 9.00 GiB memory in use. Of the "
        "allocated memory 8.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        f"to avoid fragmentation.  See documentation for Memory Management  ({OOM_DOCS_URL})"
    )
    assert err.value.requested_bytes == 2 * GiB
    s = m.memory_stats()
    assert (s["num_ooms"], s["num_alloc_retries"], s["num_sync_all_streams"]) == (1, 1, 1)
    m.free(a)


def test_oom_path_releases_cached_segments_then_retries() -> None:
    m = small_device(total=10 * GiB, context=1 * GiB)
    a = m.malloc(5 * GiB)
    m.malloc(3 * GiB)
    m.free(a)  # 5 GiB cached; 1 GiB free on the device
    c = m.malloc(5 * GiB + 2 * MiB)  # does not fit the cached block, cudaMalloc fails, release, retry
    assert m.reserved_bytes == 8 * GiB + 2 * MiB
    assert m.memory_stats()["num_alloc_retries"] == 1
    assert m.memory_stats()["num_ooms"] == 0
    m.free(c)


def test_capacity_keeps_malloc_headroom() -> None:
    total, context = 10 * GiB, 1 * GiB
    m = small_device(total=total, context=context)
    room = total - context - CUDA_MALLOC_HEADROOM_BYTES
    a = m.malloc(room)
    assert m.mem_get_info() == (CUDA_MALLOC_HEADROOM_BYTES, total)
    m.free(a)
    m.empty_cache()
    with pytest.raises(SimulatedOutOfMemoryError):
        m.malloc(room + 2 * MiB)


def test_max_split_size_oversize_blocks() -> None:
    m = small_device(conf="max_split_size_mb:64")
    a = m.malloc(100 * MiB)
    m.free(a)
    assert m.malloc(90 * MiB) == a  # within kLargeBuffer of the request: taken whole
    assert m.allocated_bytes == 100 * MiB
    s = m.memory_stats()
    assert s["oversize_allocations.current"] == 1 and s["max_split_size"] == 64 * MiB
    m.free(a)
    c = m.malloc(70 * MiB)  # 100 >= 70 + 20: not taken
    assert c != a
    m.malloc(30 * MiB)  # a small request may not take an oversize block
    assert m.reserved_bytes == 200 * MiB


def test_release_available_cached_blocks_frees_oversize_blocks_only() -> None:
    m = small_device(total=10 * GiB, context=1 * GiB, conf="max_split_size_mb:64")
    blocks = [m.malloc(n * MiB) for n in (100, 70)]
    fill = m.malloc(9 * GiB - 170 * MiB - 120 * MiB)  # 120 MiB left on the device
    for p in blocks:
        m.free(p)
    g = m.malloc(160 * MiB)  # no cached block fits; cudaMalloc fails; releasing 100 + 70 MiB >= 160 MiB
    s = m.memory_stats()
    assert (s["num_alloc_retries"], s["num_device_free"], s["num_sync_all_streams"]) == (0, 2, 0)
    assert m.reserved_bytes == 9 * GiB - 290 * MiB + 160 * MiB
    m.free(g)
    m.free(fill)


def test_release_available_single_block_then_full_release() -> None:
    m = small_device(total=10 * GiB, context=1 * GiB, conf="max_split_size_mb:64")
    a, b = m.malloc(100 * MiB), m.malloc(70 * MiB)
    fill = m.malloc(9 * GiB - 170 * MiB - 50 * MiB)  # 50 MiB left on the device
    m.free(a)
    m.malloc(75 * MiB)  # the 100 MiB block is >= 75 + 20 so not reused, but released alone
    s = m.memory_stats()
    assert (s["num_device_free"], s["num_alloc_retries"]) == (1, 0)
    m.free(b)
    m.malloc(140 * MiB)  # the oversize blocks (70 MiB) do not add up to 140 MiB: release all, retry
    s = m.memory_stats()
    assert (s["num_device_free"], s["num_alloc_retries"], s["num_ooms"]) == (2, 1, 0)
    m.free(fill)


def test_garbage_collection_releases_old_blocks() -> None:
    m = small_device(total=20 * GiB, context=1 * GiB, conf="garbage_collection_threshold:0.5")
    m.set_memory_fraction(0.5)  # 10 GiB allowed, GC above 5 GiB
    a, b = m.malloc(2 * GiB), m.malloc(2 * GiB)
    m.free(a)
    m.free(b)
    m.malloc(1 * GiB + 4 * MiB)  # takes a 2 GiB block (split), ages the other
    m.malloc(3 * GiB)  # 4 GiB reserved <= 5: no GC
    assert m.reserved_bytes == 7 * GiB
    m.malloc(3 * GiB)  # 7 GiB > 5: GC frees the unsplit cached 2 GiB block first
    assert m.reserved_bytes == 8 * GiB
    with pytest.raises(SimulatedOutOfMemoryError, match=r"10\.00 GiB allowed; "):
        m.malloc(3 * GiB)


def test_reset_peak_stats() -> None:
    m = small_device()
    a = m.malloc(100 * MiB)
    m.free(a)
    assert m.peak_allocated_bytes == 100 * MiB
    m.reset_peak_stats()
    assert m.peak_allocated_bytes == 0
    assert m.peak_reserved_bytes == 100 * MiB  # still reserved
    assert m.run_peak_allocated_bytes == 100 * MiB  # the run's peak, for the summary, survives the reset
    m.empty_cache()
    m.reset_peak_stats()
    assert m.peak_reserved_bytes == 0 and m.run_peak_reserved_bytes == 100 * MiB


def test_invalid_pointers_are_rejected() -> None:
    m = small_device()
    a = m.malloc(1000)
    m.free(a)
    with pytest.raises(ValueError, match="invalid device pointer"):
        m.free(a)
    with pytest.raises(ValueError, match="invalid device pointer"):
        m.free(12345)
    with pytest.raises(ValueError):
        m.record_stream(a, 1)


def test_one_exabyte_request_fails_at_once() -> None:
    m = small_device()
    with pytest.raises(SimulatedOutOfMemoryError, match="more than 1EB"):
        m.malloc(2**60)
    assert m.memory_stats()["num_ooms"] == 0


def test_an_operation_costs_the_same_among_many_free_blocks() -> None:
    """The pools are searched in O(log n) (`_BlockPool`): a malloc or free among thousands of cached blocks runs
    about as many lines of Python as among a few. Counted lines, not wall time: the same on any machine."""
    def lines_per_operation(blocks: int) -> float:
        m = CachingAllocatorModel(140 * GiB, GiB)
        sizes = [512 * (i % 7 + 1) * (4 ** (i % 9)) + i for i in range(blocks)]
        live = [m.malloc(n) for n in sizes]
        for ptr in live[::2]:  # every other block freed: its neighbours are live, so the pools keep them all
            m.free(ptr)
        live, lines = live[1::2], 0

        def count(frame, event, arg):
            nonlocal lines
            lines += event == "line"
            return count

        previous = sys.gettrace()
        sys.settrace(count)
        try:
            for i in range(200):
                ptr = m.malloc(sizes[7 * i % blocks])
                m.free(live.pop())
                live.insert(0, ptr)
        finally:
            sys.settrace(previous)
        return lines / 400

    assert lines_per_operation(4000) < 1.5 * lines_per_operation(40)


def test_cublas_workspace_follows_pytorchs_default_and_config():
    """32 MiB per handle and stream on compute capability 9.0, `:4096:2:16:8` elsewhere, and
    CUBLAS_WORKSPACE_CONFIG's `:SIZE_KiB:COUNT` pairs summed when set (one without a pair is ignored)."""
    assert cublas_workspace_bytes((9, 0)) == 32 * 2**20
    assert cublas_workspace_bytes((8, 0)) == 8 * 2**20 + 128 * 2**10
    assert cublas_workspace_bytes((10, 0)) == 8 * 2**20 + 128 * 2**10
    assert cublas_workspace_bytes((9, 0), ":16:8") == 128 * 2**10
    assert cublas_workspace_bytes((8, 0), ":4096:8:16:8") == 32 * 2**20 + 128 * 2**10
    assert cublas_workspace_bytes((9, 0), "nonsense") == 32 * 2**20


def test_peaks_after_a_reset_and_the_run_peak():
    """`reset_peak_memory_stats` lowers each peak to the current value; the run's peak (the summary's) keeps the
    most ever allocated; the pools' peaks move with the aggregate's."""
    m = small_device()
    big = m.malloc(40 * MiB)
    m.free(big)
    m.reset_peak_stats()
    small = m.malloc(4 * MiB)
    stats = m.memory_stats()
    assert m.peak_allocated_bytes == stats["allocated_bytes.large_pool.peak"] == 4 * MiB
    assert m.run_peak_allocated_bytes == 40 * MiB
    assert stats["allocation.all.peak"] == stats["allocation.large_pool.peak"] == 1
    assert stats["allocation.small_pool.peak"] == 0
    m.free(small)
    m.malloc(64 * MiB)
    assert m.peak_allocated_bytes == m.run_peak_allocated_bytes == 64 * MiB
    assert m.memory_stats()["allocated_bytes.all.allocated"] == 108 * MiB  # every allocation counted, resets or not
