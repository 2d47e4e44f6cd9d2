"""GPU memory model: a pure-Python emulation of PyTorch's CUDA caching allocator.

It reproduces, byte for byte, what ``torch.cuda.memory_allocated()``,
``memory_reserved()``, ``max_memory_*()``, ``memory_stats()``,
``memory_snapshot()``, ``mem_get_info()`` and ``torch.cuda.OutOfMemoryError``
report on a real GPU, given the same sequence of allocations, frees and stream
uses. Emulated: ``DeviceCachingAllocator`` in ``c10/cuda/CUDACachingAllocator.cpp``
(torch 2.11 to 2.13, default pools, no CUDA graphs) with the options of
``c10/core/AllocatorConfig.cpp`` / ``c10/cuda/CUDAAllocatorConfig.h``. Not emulated
(raise ``NotImplementedError``): ``expandable_segments:True``,
``backend:cudaMallocAsync``, ``throw_on_cudamalloc_oom:True``. See
``docs/models/memory.md`` for what matches a real H200 and what does not.

Interface (one model per simulated device)::

    model = CachingAllocatorModel(total_bytes, context_bytes, AllocatorConfig.parse(conf))
    ptr = model.malloc(nbytes, stream)   # address; 0 for nbytes == 0; may raise SimulatedOutOfMemoryError
    model.record_stream(ptr, stream)     # the block is also used on `stream`
    model.free(ptr)
    model.stream_work_done(stream)       # engine: all work queued on `stream` so far has finished
    model.stream_work_done(stream, until=mark)  # ... up to an event recorded when `model.event_mark` was `mark`
    model.synchronize()                  # engine: every stream has finished (torch.cuda.synchronize)
    model.event_probe = probe            # optional EventProbe: where the GPU stands, asked on a miss
    model.empty_cache()
    model.set_memory_fraction(0.5)
    model.allocated_bytes, model.reserved_bytes, model.peak_allocated_bytes, model.peak_reserved_bytes
    model.memory_stats(); model.reset_peak_stats(); model.snapshot(); model.mem_get_info()

Streams are integers ordered like ``cudaStream_t`` values: the default stream is 0.
The model has no clock. A block freed after ``record_stream`` stays in use until
the engine reports, through ``stream_work_done``/``synchronize``, that those
streams' work has finished, or an allocation that finds no cached block learns it
from the ``event_probe`` (Note [Cross-stream frees between syncs]); like the real
allocator, the model only notices at a ``malloc`` (``process_events``), or at once
on ``empty_cache`` and on the out-of-memory path, where the real allocator blocks
the host until the streams finish (``synchronize_and_free_events``).
"""

from __future__ import annotations

import re

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# ----------------------------------------------------------------------------- constants

MiB = 1024 * 1024

K_MIN_BLOCK_SIZE = 512
"""All sizes are rounded to at least this. c10/core/AllocatorConfig.h: kMinBlockSize."""
K_SMALL_SIZE = 1048576
"""Largest "small" allocation (1 MiB). c10/core/AllocatorConfig.h: kSmallSize."""
K_SMALL_BUFFER = 2097152
"""Small allocations are packed in 2 MiB segments. c10/core/AllocatorConfig.h: kSmallBuffer."""
K_MIN_LARGE_ALLOC = 10485760
"""Requests between 1 and 10 MiB share a large-segment-size segment. c10/core/AllocatorConfig.h: kMinLargeAlloc."""
K_ROUND_LARGE = 2097152
"""Larger requests get a segment rounded up to 2 MiB. c10/core/AllocatorConfig.h: kRoundLarge."""
K_LARGE_BUFFER = 20971520
"""Default large segment size, 20 MiB. c10/core/CachingDeviceAllocator.h: kLargeBuffer;
c10/core/AllocatorConfig.h: AcceleratorAllocatorConfig::large_segment_size_ default."""
K_ROUND_UP_POWER_OF_TWO_INTERVALS = 16
"""Intervals of roundup_power2_divisions, 1 MiB to 64 GiB. c10/core/AllocatorConfig.cpp: kRoundUpPowerOfTwoIntervals."""
K_ROUND_UP_POWER_OF_TWO_START_LOG2 = 20
"""log2(kRoundUpPowerOfTwoStart = 1 MiB). c10/core/AllocatorConfig.cpp."""
SIZE_MAX = 2**64 - 1
"""max_split_size when unset: std::numeric_limits<size_t>::max(). c10/core/AllocatorConfig.h."""
ONE_EXA_BYTES = 1152921504606846976
"""Requests of this size or more fail at once. CUDACachingAllocator.cpp: NativeCachingAllocator::allocate."""
_SIZES_KEPT = 1 << 14
"""Request sizes whose rounding the model keeps (`CachingAllocatorModel._sizes`) before it starts over."""
PINNED_MAX_REGISTER_THREADS = 128
"""c10/cuda/CUDAAllocatorConfig.h: pinned_max_register_threads()."""

CUDA_MALLOC_HEADROOM_BYTES = 2 * MiB
"""cudaMalloc fails unless this much device memory would stay free. Not from PyTorch: measured on
an H200 (driver 580.159, CUDA 13.0, data/h200/memory/allocator_probe.json scenario "capacity"): the
largest cudaMalloc that succeeds leaves 3.125 MiB free, one leaving 1.125 MiB fails."""

_VA_LARGE_TOP = 1 << 47
"""Large-pool segments are placed downwards from here (see Note [Segment addresses])."""
_VA_SMALL_BASE = 1 << 46
"""Small-pool segments are placed upwards from here (see Note [Segment addresses])."""
_VA_ALIGN = 2 * MiB
"""Simulated segments start on 2 MiB boundaries (cudaMalloc granularity)."""

# Note [Segment addresses]
# Among free blocks of equal size on one stream, the allocator picks the lowest address
# (BlockComparatorSize), so which segment gets reused depends on where cudaMalloc put each
# segment. The driver's placement is not documented. On the H200 probe, a new large segment
# usually lies below the older ones while 2 MiB segments fill gaps upwards, so the model hands
# out large-pool addresses top-down and small-pool addresses bottom-up (the pools never share
# blocks, so their relative placement does not matter). This reproduced every tie in
# data/h200/memory/allocator_probe.json. A tie never changes allocated or reserved bytes at the step
# it happens; it can change which segment becomes fully free later.

OOM_DOCS_URL = "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
"""Link in the OOM message. CUDACachingAllocator.cpp: DeviceCachingAllocator::malloc (torch 2.11 prints this one)."""

_AGGREGATE, _SMALL_POOL, _LARGE_POOL = 0, 1, 2
"""c10/core/CachingDeviceAllocator.h: StatType."""
_STAT_TYPE_NAMES = ("all", "small_pool", "large_pool")
_STAT_ARRAY_NAMES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
"""Stat arrays in DeviceStats, named as torch.cuda.memory_stats() names them."""


def format_size(nbytes: int) -> str:
    """Size pretty-printer of the OOM message. c10/core/Allocator.h: format_size."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1048576:
        return f"{nbytes / 1024.0:.2f} KiB"
    if nbytes <= 1073741824:
        return f"{nbytes / 1048576.0:.2f} MiB"
    return f"{nbytes / 1073741824.0:.2f} GiB"


# ----------------------------------------------------------------------------- config


def _is_power_of_2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _tokenize(conf: str) -> list[str]:
    """c10/core/AllocatorConfig.h: ConfigTokenizer (',', ':', '[', ']' are tokens; whitespace dropped)."""
    tokens: list[str] = []
    buf: list[str] = []
    for ch in conf:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf = []
            tokens.append(ch)
        elif not ch.isspace():
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


class _Tokens:
    """Cursor over config tokens; every error names the whole string."""

    def __init__(self, conf: str) -> None:
        self.conf = conf
        self.tokens = _tokenize(conf)

    def fail(self, why: str) -> ValueError:
        return ValueError(f"invalid PYTORCH_CUDA_ALLOC_CONF {self.conf!r}: {why}")

    def get(self, i: int, what: str) -> str:
        if i >= len(self.tokens):
            raise self.fail(f"expected {what} at the end")
        return self.tokens[i]

    def expect(self, i: int, token: str) -> None:
        got = self.get(i, repr(token))
        if got != token:
            raise self.fail(f"expected {token!r} but got {got!r}")

    def integer(self, i: int, key: str) -> int:
        tok = self.get(i, f"a value for {key}")
        if not tok.isdigit():
            raise self.fail(f"{key} needs a non-negative integer, got {tok!r}")
        return int(tok)

    def number(self, i: int, key: str) -> float:
        tok = self.get(i, f"a value for {key}")
        try:
            return float(tok)
        except ValueError:
            raise self.fail(f"{key} needs a number, got {tok!r}") from None

    def boolean(self, i: int, key: str) -> bool:
        tok = self.get(i, f"True/False for {key}")
        if tok not in ("True", "False"):
            raise self.fail(f"{key} needs True or False, got {tok!r}")
        return tok == "True"

    def skip_value(self, i: int) -> int:
        """Index of the last token of the value starting at i (a single token or a [list])."""
        if self.get(i, "a value") != "[":
            return i
        while i + 1 < len(self.tokens) and self.tokens[i + 1] != "]":
            i += 1
        if i + 1 >= len(self.tokens):
            raise self.fail("missing ']'")
        return i + 1


_IGNORED_KEYS = frozenset(
    {
        # host (pinned) allocator and locking: no effect on device memory accounting
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_num_register_threads",
        "pinned_use_background_threads",
        "pinned_max_round_threshold",
        "pinned_max_cached_size",
        "pinned_reserve_segment_size_mb",
        # only matters during CUDA graph capture, which the model does not emulate
        "graph_capture_record_stream_reuse",
        "expandable_segments_handle_type",
    }
)
"""Keys accepted and ignored. c10/core/AllocatorConfig.cpp and c10/cuda/CUDAAllocatorConfig.cpp: parseArgs."""


@dataclass(kw_only=True, slots=True, frozen=True)
class AllocatorConfig:
    """Caching-allocator options, as PYTORCH_CUDA_ALLOC_CONF sets them. Build one with ``parse``."""

    max_split_size_bytes: int = SIZE_MAX
    """Blocks this large or larger are never split (max_split_size_mb); SIZE_MAX means unlimited."""
    max_non_split_rounding_bytes: int = K_LARGE_BUFFER
    """An oversize cached block serves a request only if it is less than this much larger
    (max_non_split_rounding_mb; defaults to large_segment_size)."""
    large_segment_size_bytes: int = K_LARGE_BUFFER
    """Segment size for 1-10 MiB requests (large_segment_size_mb)."""
    roundup_power2_divisions: tuple[int, ...] = (0,) * K_ROUND_UP_POWER_OF_TWO_INTERVALS
    """Divisions per power-of-two interval [1 MiB * 2**i, 1 MiB * 2**(i+1)); 0 or 1 means plain 512 B rounding."""
    garbage_collection_threshold: float = 0.0
    """Reclaim old cached blocks above this fraction of the allowed memory (needs a memory fraction < 1)."""
    expandable_segments: bool = False
    """expandable_segments:True (not emulated: the model raises NotImplementedError)."""
    backend: str = "native"
    """'native' or 'cudaMallocAsync' (the latter is not emulated)."""
    per_process_memory_fraction: float = 1.0
    """Initial per-process memory fraction, as torch.cuda.set_per_process_memory_fraction would set it."""
    throw_on_cudamalloc_oom: bool = False
    """Fail before calling cudaMalloc when it would fail (not emulated)."""
    source: str = field(default="", compare=False)
    """The string this config was parsed from (for messages)."""

    def __post_init__(self) -> None:
        if len(self.roundup_power2_divisions) != K_ROUND_UP_POWER_OF_TWO_INTERVALS:
            raise ValueError(f"roundup_power2_divisions needs {K_ROUND_UP_POWER_OF_TWO_INTERVALS} entries")
        for d in self.roundup_power2_divisions:
            if d != 0 and not _is_power_of_2(d):
                raise ValueError(f"roundup_power2_divisions must be powers of 2 or 0, got {d}")
        if self.large_segment_size_bytes <= K_MIN_LARGE_ALLOC:
            raise ValueError("large_segment_size must be > 10 MiB")
        if self.max_split_size_bytes < self.large_segment_size_bytes:
            raise ValueError("max_split_size must be >= large_segment_size")
        if self.max_non_split_rounding_bytes < self.large_segment_size_bytes:
            raise ValueError("max_non_split_rounding must be >= large_segment_size")
        if self.garbage_collection_threshold != 0.0 and not 0.0 < self.garbage_collection_threshold < 1.0:
            raise ValueError("garbage_collection_threshold must be in (0.0, 1.0)")
        if not 0.0 <= self.per_process_memory_fraction <= 1.0:
            raise ValueError("per_process_memory_fraction must be in [0, 1]")
        if self.backend not in ("native", "cudaMallocAsync"):
            raise ValueError(f"unknown allocator backend {self.backend!r}: options are native and cudaMallocAsync")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AllocatorConfig:
        """The config a process with this environment gets: PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF.
        (c10/cuda/CUDAAllocatorConfig.h: CUDAAllocatorConfig::instance)"""
        conf = environ.get("PYTORCH_CUDA_ALLOC_CONF")
        if conf is None:
            conf = environ.get("PYTORCH_ALLOC_CONF")
        return cls.parse(conf or "")

    @classmethod
    def parse(cls, conf: str) -> AllocatorConfig:
        """Parse a PYTORCH_CUDA_ALLOC_CONF string like "max_split_size_mb:128,expandable_segments:False".

        Follows AcceleratorAllocatorConfig::parseArgs (c10/core/AllocatorConfig.cpp): values in MB
        mean MiB; large_segment_size_mb is read first because the split limits must not be below it.
        Raises ValueError for a malformed string or an unknown key.
        """
        t = _Tokens(conf)
        tokens = t.tokens
        values: dict[str, Any] = {"source": conf}
        large_segment = K_LARGE_BUFFER
        for i, tok in enumerate(tokens):
            if tok == "large_segment_size_mb":
                t.expect(i + 1, ":")
                mb = t.integer(i + 2, tok)
                if mb <= K_MIN_LARGE_ALLOC // MiB:
                    raise t.fail(f"large_segment_size_mb must be > {K_MIN_LARGE_ALLOC // MiB} MB, got {mb}")
                large_segment = mb * MiB
        values["large_segment_size_bytes"] = large_segment
        values["max_non_split_rounding_bytes"] = large_segment

        i = 0
        while i < len(tokens):
            key = tokens[i]
            t.expect(i + 1, ":")
            i += 2
            if key == "large_segment_size_mb":
                t.integer(i, key)
            elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
                mb = t.integer(i, key)
                if mb * MiB < large_segment:
                    raise t.fail(f"{key} too small, must be >= {large_segment // MiB}")
                field_name = "max_split_size_bytes" if key == "max_split_size_mb" else "max_non_split_rounding_bytes"
                values[field_name] = min(mb, SIZE_MAX // MiB) * MiB
            elif key == "garbage_collection_threshold":
                v = t.number(i, key)
                if not 0.0 < v < 1.0:
                    raise t.fail("garbage_collection_threshold is invalid, set it in (0.0, 1.0)")
                values["garbage_collection_threshold"] = v
            elif key == "roundup_power2_divisions":
                i, values["roundup_power2_divisions"] = _parse_roundup(t, i)
            elif key == "expandable_segments":
                values["expandable_segments"] = t.boolean(i, key)
            elif key == "backend":
                backend = t.get(i, "a backend")
                if backend not in ("native", "cudaMallocAsync"):
                    raise t.fail(f"unknown allocator backend {backend!r}: options are native and cudaMallocAsync")
                values["backend"] = backend
            elif key == "per_process_memory_fraction":
                v = t.number(i, key)
                if not 0.0 <= v <= 1.0:
                    raise t.fail("per_process_memory_fraction must be in [0, 1]")
                values["per_process_memory_fraction"] = v
            elif key == "throw_on_cudamalloc_oom":
                values["throw_on_cudamalloc_oom"] = t.boolean(i, key)
            elif key == "pinned_num_register_threads":
                n = t.integer(i, key)
                if not _is_power_of_2(n) or n > PINNED_MAX_REGISTER_THREADS:
                    raise t.fail(f"pinned_num_register_threads must be a power of 2 <= {PINNED_MAX_REGISTER_THREADS}")
            elif key in _IGNORED_KEYS:
                i = t.skip_value(i)
            else:
                raise t.fail(f"unrecognized key {key!r}")
            if i + 1 < len(tokens):
                t.expect(i + 1, ",")
                i += 1
            i += 1
        return cls(**values)


def _parse_roundup(t: _Tokens, i: int) -> tuple[int, tuple[int, ...]]:
    """roundup_power2_divisions: a single power of 2 for every interval, or [MB:div, ..., >:div].
    c10/core/AllocatorConfig.cpp: AcceleratorAllocatorConfig::parseRoundUpPower2Divisions."""
    divisions = [0] * K_ROUND_UP_POWER_OF_TWO_INTERVALS
    key = "roundup_power2_divisions"
    if t.get(i, f"a value for {key}") != "[":
        value = t.integer(i, key)
        if not _is_power_of_2(value):
            raise t.fail("for roundups, the divisions has to be power of 2")
        return i, (value,) * K_ROUND_UP_POWER_OF_TWO_INTERVALS
    first_value = True
    last_index = 0
    i += 1
    while i < len(t.tokens) and t.tokens[i] != "]":
        boundary_tok = t.tokens[i]
        t.expect(i + 1, ":")
        value = t.integer(i + 2, key)
        i += 2
        if value != 0 and not _is_power_of_2(value):
            raise t.fail("for roundups, the divisions has to be power of 2 or 0 to disable roundup")
        if boundary_tok == ">":
            for j in range(last_index + 1, K_ROUND_UP_POWER_OF_TWO_INTERVALS):
                divisions[j] = value
        else:
            if not boundary_tok.isdigit() or not _is_power_of_2(int(boundary_tok)):
                raise t.fail(f"for roundups, the intervals have to be power of 2, got {boundary_tok!r}")
            index = min(int(boundary_tok).bit_length() - 1, K_ROUND_UP_POWER_OF_TWO_INTERVALS - 1)
            if first_value:
                for j in range(index):
                    divisions[j] = value
                first_value = False
            divisions[index] = value
            last_index = index
        if t.get(i + 1, "']'") != "]":
            t.expect(i + 1, ",")
            i += 1
        i += 1
    if i >= len(t.tokens):
        raise t.fail("missing ']'")
    return i, tuple(divisions)


# ----------------------------------------------------------------------------- size rules


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round up to the next of `divisions` equal steps between two powers of two.
    c10/core/CachingDeviceAllocator.h / CUDACachingAllocator.cpp: roundup_power2_next_division."""
    if _is_power_of_2(size):
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    power2_division = power2_floor >> (divisions.bit_length() - 1)
    if power2_division == 0:
        return power2_floor << 1
    round_size_floor = size & ~(power2_division - 1)
    return size if round_size_floor == size else round_size_floor + power2_division


def divisions_for_size(size: int, config: AllocatorConfig) -> int:
    """c10/core/AllocatorConfig.cpp: AcceleratorAllocatorConfig::roundup_power2_divisions(size)."""
    log_size = size.bit_length() - 1
    index = max(0, log_size - K_ROUND_UP_POWER_OF_TWO_START_LOG2)
    return config.roundup_power2_divisions[min(index, K_ROUND_UP_POWER_OF_TWO_INTERVALS - 1)]


def round_size(size: int, config: AllocatorConfig) -> int:
    """Block size for a request. CUDACachingAllocator.cpp: DeviceCachingAllocator::round_size."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = divisions_for_size(size, config)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def allocation_size(size: int, config: AllocatorConfig) -> int:
    """cudaMalloc size of a new segment for a rounded request.
    CUDACachingAllocator.cpp: DeviceCachingAllocator::get_allocation_size."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return config.large_segment_size_bytes
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


# ----------------------------------------------------------------------------- state


class SimulatedOutOfMemoryError(Exception):
    """The allocator could not satisfy a request; the message is what PyTorch prints.
    The runtime converts it to torch.cuda.OutOfMemoryError."""

    def __init__(self, message: str, *, requested_bytes: int, device_index: int) -> None:
        super().__init__(message)
        self.requested_bytes = requested_bytes
        self.device_index = device_index


class Stat:
    """One counter of DeviceStats. c10/core/Allocator.h: Stat (increase/decrease/reset_*)."""

    __slots__ = ("current", "peak", "run_peak", "allocated", "freed")

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.run_peak = 0
        """The peak over the whole run: the program's `reset_peak_memory_stats` does not reset it."""
        self.allocated = 0
        self.freed = 0

    def increase(self, amount: int) -> None:
        current = self.current = self.current + amount
        if current > self.peak:  # run_peak >= peak always: it is never reset
            self.peak = current
            if current > self.run_peak:
                self.run_peak = current
        self.allocated += amount

    def decrease(self, amount: int) -> None:
        self.current -= amount
        assert self.current >= 0, "negative allocator stat (model bug)"
        self.freed += amount

    def reset_peak(self) -> None:
        self.peak = self.current

    def reset_accumulated(self) -> None:
        self.allocated = 0
        self.freed = 0


def _increase(stats: tuple[Stat, ...], amount: int) -> None:
    """`Stat.increase` of the aggregate stat and the pool's (what `for_each_selected_stat_type` updates), inline:
    the allocator model changes a dozen stats per allocation, on every new tensor of the program."""
    for stat in stats:
        current = stat.current = stat.current + amount
        if current > stat.peak:
            stat.peak = current
            if current > stat.run_peak:
                stat.run_peak = current
        stat.allocated += amount


def _decrease(stats: tuple[Stat, ...], amount: int) -> None:
    """`Stat.decrease` of the aggregate stat and the pool's, inline."""
    for stat in stats:
        current = stat.current = stat.current - amount
        assert current >= 0, "negative allocator stat (model bug)"
        stat.freed += amount


class _Block:
    """A piece of a segment. Mirrors struct Block in CUDACachingAllocator.cpp, including object
    identity across split/merge (which decides the stale requested_size a snapshot shows)."""

    __slots__ = (
        "stream",
        "size",
        "requested_size",
        "pool",
        "ptr",
        "allocated",
        "prev",
        "next",
        "event_count",
        "stream_uses",
        "gc_count_base",
    )

    def __init__(self, stream: int, size: int, pool: _BlockPool, ptr: int) -> None:
        self.stream = stream
        self.size = size
        self.requested_size = 0
        self.pool = pool
        self.ptr = ptr
        self.allocated = False
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.event_count = 0
        self.stream_uses: set[int] = set()
        self.gc_count_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def key(self) -> tuple[int, int, int]:
        """Position in BlockPool::blocks: BlockComparatorSize orders by (stream, size, address)."""
        return (self.stream, self.size, self.ptr)


class _PoolStats:
    """The stats a change in one pool updates: for each stat array, its aggregate stat and the pool's."""

    __slots__ = (*_STAT_ARRAY_NAMES, "block_counts", "block_bytes")

    def __init__(self, stats: list[list[Stat]], pool_type: int) -> None:
        for name, array in zip(_STAT_ARRAY_NAMES, stats):
            setattr(self, name, (array[_AGGREGATE], array[pool_type]))
        self.block_counts = (*self.allocation, *self.active)
        """What a block's allocation counts up by one (`alloc_found_block`'s allocation and active stats)..."""
        self.block_bytes = (*self.allocated_bytes, *self.active_bytes)
        """... and by the block's size: one call each instead of one per stat array."""


class _BlockPool:
    """Free, reusable blocks of one kind (small or large), kept sorted like the real std::set.
    A sorted list of keys plus bisect: O(log n) search; insertion and removal move pointers only."""

    __slots__ = ("is_small", "keys", "by_ptr", "get_free_blocks_call_count", "stats")

    def __init__(self, is_small: bool, stats: list[list[Stat]]) -> None:
        self.is_small = is_small
        self.keys: list[tuple[int, int, int]] = []
        self.by_ptr: dict[int, _Block] = {}
        self.get_free_blocks_call_count = 0
        self.stats = _PoolStats(stats, _SMALL_POOL if is_small else _LARGE_POOL)

    def insert(self, block: _Block) -> None:
        """BlockPool::insert_into_blocks: also stamps the block's age for garbage collection."""
        block.gc_count_base = self.get_free_blocks_call_count
        insort(self.keys, (block.stream, block.size, block.ptr))  # block.key(), inline (every allocation and free)
        self.by_ptr[block.ptr] = block

    def erase(self, block: _Block) -> None:
        key = (block.stream, block.size, block.ptr)  # block.key(), inline
        i = bisect_left(self.keys, key)
        assert i < len(self.keys) and self.keys[i] == key, "block not in pool (model bug)"
        del self.keys[i]
        del self.by_ptr[block.ptr]

    def lower_bound(self, stream: int, size: int) -> int:
        """Index of the first block not ordered before the search key Block(stream, size, nullptr)."""
        return bisect_left(self.keys, (stream, size, 0))

    def at(self, index: int) -> _Block:
        return self.by_ptr[self.keys[index][2]]


@dataclass(slots=True)
class _AllocParams:
    """CUDACachingAllocator.cpp: AllocParams."""

    size: int
    stream: int
    pool: _BlockPool
    alloc_size: int
    block: _Block | None = None


# ----------------------------------------------------------------------------- cuBLAS workspaces


def cublas_workspace_bytes(compute_capability: tuple[int, int], config: str | None = None) -> int:
    """Bytes of the workspace PyTorch gives each cuBLAS handle on each stream (CublasHandlePool.cpp,
    `parseChosenWorkspaceSize`): `CUBLAS_WORKSPACE_CONFIG`'s `:SIZE_KiB:COUNT` pairs, summed; unset,
    32 MiB on compute capability 9.0 (`:4096:8`) and `:4096:2:16:8` (8 MiB + 128 KiB) on others.
    cuBLASLt uses the same one: real torch 2.11 runs allocate 32 MiB per thread, not two per thread.
    A config with no pair is ignored, as there."""
    if config:
        pairs = re.findall(r":(\d+):(\d+)", config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    if tuple(compute_capability) == (9, 0):
        return 4096 * 1024 * 8
    return 4096 * 1024 * 2 + 16 * 1024 * 8


# ----------------------------------------------------------------------------- the allocator


class EventProbe(Protocol):
    """The GPU's progress on the streams of blocks freed after `record_stream`, as the real allocator's
    `cudaEventQuery` finds it (Note [Cross-stream frees between syncs])."""

    def recorded(self, stream: int, seq: int) -> None:
        """An event `seq` is recorded on `stream` now (a block used there was freed)."""

    def completed(self, stream: int, seqs: list[int]) -> int:
        """The last of `stream`'s pending events `seqs` (ascending) that the GPU has passed by now; 0 if none."""

    def retired(self, seq: int) -> None:
        """The allocator no longer waits for event `seq`."""


# Note [Cross-stream frees between syncs]
# A block freed after `record_stream(s)` returns to its pool once the GPU has passed the event the free
# recorded on `s`: the real allocator asks `cudaEventQuery` at every `malloc`. The model has no clock, so
# the engine tells it: a host sync, or a CUDA event found complete, completes the events recorded on that
# stream before it (`stream_work_done`). Between syncs, though, the GPU moves on where the host does not
# look. FSDP1 records every layer's low-precision shard on its all-gather stream and never syncs that
# stream: without asking, each layer's shard stayed pending and the step reserved a new segment per layer
# (Accelerate FSDP1 on a 1B Llama: 46.5 GiB reserved where the GPU reserved 43.0). So when an allocation
# finds no cached block while events are pending, the model asks its `event_probe` (the coordinator, which
# knows where each stream stands at the host's time) which of them have completed, frees their blocks and
# looks again. The real allocator would have freed them at the first allocation after they completed, not
# at the first that needed them: an allocation that finds some cached block may take another one than the
# real allocator would (and fragment differently later), but no segment is reserved for want of a block the
# GPU had released. Asking costs the simulation a round trip, so only a miss asks.


class CachingAllocatorModel:
    """The caching allocator of one simulated GPU.

    total_bytes: device memory as ``torch.cuda.get_device_properties().total_memory`` reports it.
    context_bytes: memory in use before the allocator reserves anything, as ``total - free`` of
        ``cudaMemGetInfo`` shows it (CUDA context, driver reservations; add NCCL buffers and other
        non-PyTorch allocations when they appear: the attribute may be changed later).
    nvml_context_bytes: the part of ``context_bytes`` NVML attributes to this process, which the
        OOM message prints as "this process has ... in use" (default: all of ``context_bytes``).
    malloc_headroom_bytes: cudaMalloc fails unless this much would stay free (measured, see
        CUDA_MALLOC_HEADROOM_BYTES).
    """

    def __init__(
        self,
        total_bytes: int,
        context_bytes: int,
        config: AllocatorConfig | None = None,
        device_index: int = 0,
        *,
        nvml_context_bytes: int | None = None,
        malloc_headroom_bytes: int = CUDA_MALLOC_HEADROOM_BYTES,
    ) -> None:
        if total_bytes <= 0 or not 0 <= context_bytes < total_bytes:
            raise ValueError(f"need 0 <= context_bytes < total_bytes, got {context_bytes} and {total_bytes}")
        self.config = config or AllocatorConfig()
        if self.config.expandable_segments:
            raise NotImplementedError(
                "PYTORCH_CUDA_ALLOC_CONF expandable_segments:True is not emulated by the Phantora memory model"
            )
        if self.config.backend != "native":
            raise NotImplementedError(f"allocator backend {self.config.backend!r} is not emulated (only 'native')")
        if self.config.throw_on_cudamalloc_oom:
            raise NotImplementedError("throw_on_cudamalloc_oom:True is not emulated")
        self.total_bytes = total_bytes
        self.context_bytes = context_bytes
        self.nvml_context_bytes = context_bytes if nvml_context_bytes is None else nvml_context_bytes
        self.malloc_headroom_bytes = malloc_headroom_bytes
        self.device_index = device_index

        self._stats: list[list[Stat]] = [[Stat() for _ in _STAT_TYPE_NAMES] for _ in _STAT_ARRAY_NAMES]
        self._small = _BlockPool(True, self._stats)
        self._large = _BlockPool(False, self._stats)
        self._allocated_bytes = self._stats[_STAT_ARRAY_NAMES.index("allocated_bytes")]
        self._reserved_bytes = self._stats[_STAT_ARRAY_NAMES.index("reserved_bytes")]
        self._oversize_allocations = Stat()
        self._oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

        self._total_allocated_memory = 0  # bytes held from cudaMalloc (== reserved, all pools)
        self._allowed_memory_maximum: int | None = None
        self.set_memory_fraction(self.config.per_process_memory_fraction)

        self._sizes: dict[int, tuple[int, int]] = {}
        """Request -> (its block size, the size of a new segment for it): pure functions of the request and the
        config, worked out once per request size (a training step repeats its tensors' sizes)."""
        self._blocks: dict[int, _Block] = {}  # every live block (free, allocated, pending) by address
        self._segments: dict[int, int] = {}  # segment base address -> size
        self._next_large_va = _VA_LARGE_TOP
        self._next_small_va = _VA_SMALL_BASE
        # record_stream bookkeeping: per stream, FIFO of (event sequence number, block)
        self._events: dict[int, deque[tuple[int, _Block]]] = {}
        self._event_seq = 0
        self._stream_done_seq: dict[int, int] = {}
        self.event_probe: EventProbe | None = None
        """Where the GPU stands, for blocks freed after `record_stream` (Note [Cross-stream frees between
        syncs]); None: only the engine's notifications complete their events."""

    # ------------------------------------------------------------------ public: the hot path

    def malloc(self, nbytes: int, stream: int = 0) -> int:
        """Allocate `nbytes` for use on `stream`; returns the block's address (0 for 0 bytes).
        CUDACachingAllocator.cpp: NativeCachingAllocator::allocate + DeviceCachingAllocator::malloc."""
        if nbytes < 0:
            raise ValueError(f"negative allocation size {nbytes}")
        if nbytes >= ONE_EXA_BYTES:
            raise SimulatedOutOfMemoryError(
                "CUDA out of memory. Tried to allocate more than 1EB memory.",
                requested_bytes=nbytes,
                device_index=self.device_index,
            )
        if nbytes == 0:
            return 0  # PyTorch hands out nullptr and touches no state
        if self._events:
            self._process_events()
        sizes = self._sizes.get(nbytes)
        if sizes is None:
            if len(self._sizes) >= _SIZES_KEPT:
                self._sizes.clear()
            size = round_size(nbytes, self.config)
            sizes = self._sizes[nbytes] = (size, allocation_size(size, self.config))
        size = sizes[0]
        pool = self._small if size <= K_SMALL_SIZE else self._large
        p = _AllocParams(size=size, stream=stream, pool=pool, alloc_size=sizes[1])

        found = self._get_free_block(p)
        if not found and self._events and self._probe_events():
            found = self._get_free_block(p)
        if not found:
            if self._allowed_memory_maximum is not None and self.config.garbage_collection_threshold > 0.0:
                self._garbage_collect_cached_blocks()
            found = (
                self._alloc_block(p, is_retry=False)
                or (self._release_available_cached_blocks(p) and self._alloc_block(p, is_retry=False))
                or (self._release_cached_blocks() and self._alloc_block(p, is_retry=True))
            )
        if not found:
            self.num_ooms += 1
            raise SimulatedOutOfMemoryError(
                self._oom_message(p.alloc_size), requested_bytes=nbytes, device_index=self.device_index
            )
        assert p.block is not None
        return self._alloc_found_block(p, nbytes, self._should_split(p.block, size))

    def free(self, ptr: int) -> None:
        """Return a block. CUDACachingAllocator.cpp: DeviceCachingAllocator::free."""
        if ptr == 0:
            return
        block = self._blocks.get(ptr)
        if block is None or not block.allocated:
            raise ValueError(f"invalid device pointer: {ptr:#x}")
        block.allocated = False
        stats = block.pool.stats
        _decrease(stats.allocation, 1)
        _decrease(stats.allocated_bytes, block.size)
        if block.size >= self.config.max_split_size_bytes:
            self._oversize_allocations.decrease(1)
        if block.stream_uses:
            self._insert_events(block)
        else:
            self._free_block(block)

    def record_stream(self, ptr: int, stream: int) -> None:
        """Mark an allocated block as also used on `stream`. DeviceCachingAllocator::recordStream."""
        if ptr == 0:
            return  # empty tensors have no block
        block = self._blocks.get(ptr)
        if block is None or not block.allocated:
            raise ValueError(f"record_stream on a pointer that is not allocated: {ptr:#x}")
        if stream != block.stream:  # uses on the allocation stream need no synchronization
            block.stream_uses.add(stream)

    # ------------------------------------------------------------------ public: engine notifications

    @property
    def event_mark(self) -> int:
        """A mark of the events inserted so far: `stream_work_done(stream, until=mark)` completes those of `stream`."""
        return self._event_seq

    def stream_work_done(self, stream: int, until: int | None = None) -> None:
        """Every event recorded on `stream` so far has completed (the engine saw the stream drain), or those
        recorded before `until`, an `event_mark` taken when a CUDA event was recorded on `stream` that has now
        completed: the stream reached that point, so it passed every free recorded on it before."""
        if stream in self._events:
            done = self._event_seq if until is None else until
            self._stream_done_seq[stream] = max(self._stream_done_seq.get(stream, 0), done)

    def synchronize(self) -> None:
        """Every stream has drained (torch.cuda.synchronize, or the engine knows all work finished)."""
        for stream in self._events:
            self._stream_done_seq[stream] = self._event_seq

    def pending_event_streams(self) -> set[int]:
        """Streams whose completion would return blocks freed after record_stream."""
        return set(self._events)

    # ------------------------------------------------------------------ public: cache control

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache: release every fully free segment. Waits for record_stream events."""
        self._release_cached_blocks()

    def set_memory_fraction(self, fraction: float) -> None:
        """torch.cuda.set_per_process_memory_fraction. DeviceCachingAllocator::setMemoryFraction."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"invalid fraction: {fraction}. Please set within [0, 1].")
        self._allowed_memory_maximum = int(fraction * float(self.total_bytes)) if fraction < 1.0 else None

    # ------------------------------------------------------------------ public: queries

    @property
    def allocated_bytes(self) -> int:
        """torch.cuda.memory_allocated()."""
        return self._allocated_bytes[_AGGREGATE].current

    @property
    def reserved_bytes(self) -> int:
        """torch.cuda.memory_reserved()."""
        return self._reserved_bytes[_AGGREGATE].current

    @property
    def peak_allocated_bytes(self) -> int:
        """torch.cuda.max_memory_allocated()."""
        return self._allocated_bytes[_AGGREGATE].peak

    @property
    def peak_reserved_bytes(self) -> int:
        """torch.cuda.max_memory_reserved()."""
        return self._reserved_bytes[_AGGREGATE].peak

    @property
    def run_peak_allocated_bytes(self) -> int:
        """The most ever allocated, whatever peak resets the program made (the summary's peak memory)."""
        return self._allocated_bytes[_AGGREGATE].run_peak

    @property
    def run_peak_reserved_bytes(self) -> int:
        return self._reserved_bytes[_AGGREGATE].run_peak

    def mem_get_info(self) -> tuple[int, int]:
        """torch.cuda.mem_get_info(): (free, total) bytes of the device."""
        return (max(0, self.total_bytes - self.context_bytes - self._total_allocated_memory), self.total_bytes)

    def memory_stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats(): the same keys, sorted as PyTorch sorts them."""
        out: dict[str, int] = {}
        for name, array in zip(_STAT_ARRAY_NAMES, self._stats):
            for type_name, stat in zip(_STAT_TYPE_NAMES, array):
                _put_stat(out, f"{name}.{type_name}", stat)
        _put_stat(out, "oversize_allocations", self._oversize_allocations)
        _put_stat(out, "oversize_segments", self._oversize_segments)
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        out["num_sync_all_streams"] = self.num_sync_all_streams
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        max_split = self.config.max_split_size_bytes
        out["max_split_size"] = -1 if max_split == SIZE_MAX else max_split  # int64 cast of size_t
        return dict(sorted(out.items()))

    def reset_peak_stats(self) -> None:
        """torch.cuda.reset_peak_memory_stats. DeviceCachingAllocator::resetPeakStats."""
        for array in self._stats:
            for stat in array:
                stat.reset_peak()
        self._oversize_allocations.reset_peak()
        self._oversize_segments.reset_peak()

    def reset_accumulated_stats(self) -> None:
        """torch.cuda.reset_accumulated_memory_stats. DeviceCachingAllocator::resetAccumulatedStats."""
        for array in self._stats:
            for stat in array:
                stat.reset_accumulated()
        self._oversize_allocations.reset_accumulated()
        self._oversize_segments.reset_accumulated()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    def snapshot(self) -> list[dict[str, Any]]:
        """torch.cuda.memory_snapshot() (segments sorted by address; no stack frames).
        O(number of blocks): for reports, not for every step. DeviceCachingAllocator::snapshot."""
        result = []
        for base in sorted(self._segments):
            block: _Block | None = self._blocks[base]
            assert block is not None and block.prev is None
            seg: dict[str, Any] = {
                "device": self.device_index,
                "address": base,
                "total_size": 0,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": block.stream,
                "segment_type": "small" if block.pool.is_small else "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [],
            }
            while block is not None:
                active = block.allocated or block.event_count > 0 or bool(block.stream_uses)
                if block.allocated:
                    state = "active_allocated"
                elif active:
                    state = "active_pending_free"
                else:
                    state = "inactive"
                seg["blocks"].append(
                    {
                        "address": block.ptr,
                        "size": block.size,
                        "requested_size": block.requested_size,
                        "state": state,
                        "frames": [],
                    }
                )
                seg["total_size"] += block.size
                if block.allocated:
                    seg["allocated_size"] += block.size
                if active:
                    seg["active_size"] += block.size
                    seg["requested_size"] += block.requested_size
                block = block.next
            result.append(seg)
        return result

    # ------------------------------------------------------------------ internals (names follow the C++)

    def _get_free_block(self, p: _AllocParams) -> bool:
        """Best fit: the smallest cached block on the same stream. DeviceCachingAllocator::get_free_block."""
        pool = p.pool
        if self._allowed_memory_maximum is not None and self.config.garbage_collection_threshold > 0.0:
            pool.get_free_blocks_call_count += 1  # ages blocks for garbage collection
        keys = pool.keys
        i = bisect_left(keys, (p.stream, p.size, 0))  # pool.lower_bound and pool.at, inline (every allocation)
        if i == len(keys) or keys[i][0] != p.stream:
            return False
        block = pool.by_ptr[keys[i][2]]
        max_split = self.config.max_split_size_bytes
        if p.size < max_split and block.size >= max_split:
            return False  # do not return an oversized block for a small request
        if p.size >= max_split and block.size >= p.size + self.config.max_non_split_rounding_bytes:
            return False  # oversized blocks serve requests only within the rounding limit
        pool.erase(block)
        p.block = block
        return True

    def _alloc_block(self, p: _AllocParams, is_retry: bool) -> bool:
        """cudaMalloc a new segment. DeviceCachingAllocator::alloc_block."""
        size = p.alloc_size
        if is_retry:
            self.num_alloc_retries += 1
        allowed = self._allowed_memory_maximum
        if allowed is not None and self._total_allocated_memory + size > allowed:
            return False
        free, _ = self.mem_get_info()
        if size + self.malloc_headroom_bytes > free:
            return False  # cudaErrorMemoryAllocation
        span = -(-size // _VA_ALIGN) * _VA_ALIGN
        if p.pool.is_small:  # Note [Segment addresses]
            ptr = self._next_small_va
            self._next_small_va += span
        else:
            self._next_large_va -= span
            ptr = self._next_large_va
        self._total_allocated_memory += size
        block = _Block(p.stream, size, p.pool, ptr)
        self._blocks[ptr] = block
        self._segments[ptr] = size
        _increase(p.pool.stats.segment, 1)
        _increase(p.pool.stats.reserved_bytes, size)
        if size >= self.config.max_split_size_bytes:
            self._oversize_segments.increase(1)
        self.num_device_alloc += 1
        p.block = block
        return True

    def _should_split(self, block: _Block, size: int) -> bool:
        """DeviceCachingAllocator::should_split."""
        remaining = block.size - size
        if block.pool.is_small:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.config.max_split_size_bytes and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, p: _AllocParams, orig_size: int, split_remainder: bool) -> int:
        """DeviceCachingAllocator::alloc_found_block."""
        block = p.block
        assert block is not None
        size = p.size
        pool = p.pool
        stats = pool.stats
        already_split = block.is_split()
        if split_remainder:
            remaining = block
            block = _Block(p.stream, size, pool, remaining.ptr)
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            self._blocks[block.ptr] = block
            self._blocks[remaining.ptr] = remaining
            pool.insert(remaining)
            if already_split:
                # an already-split inactive block shrinks by `size`
                _decrease(stats.inactive_split_bytes, size)
            else:
                # a new inactive split block appears
                _increase(stats.inactive_split_bytes, remaining.size)
                _increase(stats.inactive_split, 1)
        elif already_split:
            # an already-split block becomes active
            _decrease(stats.inactive_split_bytes, block.size)
            _decrease(stats.inactive_split, 1)

        block.allocated = True
        block.requested_size = orig_size
        _increase(stats.block_counts, 1)  # allocation and active
        _increase(stats.block_bytes, block.size)  # allocated_bytes and active_bytes
        _increase(stats.requested_bytes, orig_size)
        if block.size >= self.config.max_split_size_bytes:
            self._oversize_allocations.increase(1)
        return block.ptr

    def _free_block(self, block: _Block) -> None:
        """Move a block back into its pool, merging free neighbours. DeviceCachingAllocator::free_block."""
        assert not block.allocated and block.event_count == 0 and not block.stream_uses
        original_size = block.size
        requested_size = block.requested_size
        pool = block.pool
        net_blocks = 0
        net_bytes = 0
        for candidate in (block.prev, block.next):
            subsumed = self._try_merge_blocks(block, candidate, pool)
            if subsumed > 0:
                net_blocks -= 1
                net_bytes -= subsumed
        pool.insert(block)
        if block.is_split():
            net_blocks += 1
            net_bytes += block.size
        stats = pool.stats
        if net_blocks > 0:
            _increase(stats.inactive_split, net_blocks)
        elif net_blocks < 0:
            _decrease(stats.inactive_split, -net_blocks)
        if net_bytes > 0:
            _increase(stats.inactive_split_bytes, net_bytes)
        elif net_bytes < 0:
            _decrease(stats.inactive_split_bytes, -net_bytes)
        _decrease(stats.active, 1)
        _decrease(stats.active_bytes, original_size)
        _decrease(stats.requested_bytes, requested_size)

    def _try_merge_blocks(self, dst: _Block, src: _Block | None, pool: _BlockPool) -> int:
        """Absorb a free neighbour; returns its size or 0. DeviceCachingAllocator::try_merge_blocks."""
        if src is None or src.allocated or src.event_count > 0 or src.stream_uses:
            return 0
        pool.erase(src)
        if dst.prev is src:  # [src dst]
            del self._blocks[dst.ptr]
            dst.ptr = src.ptr
            self._blocks[dst.ptr] = dst
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            del self._blocks[src.ptr]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _release_available_cached_blocks(self, p: _AllocParams) -> bool:
        """Free oversize cached blocks, only enough for the request.
        DeviceCachingAllocator::release_available_cached_blocks."""
        max_split = self.config.max_split_size_bytes
        if max_split == SIZE_MAX:
            return False
        pool = p.pool
        key_size = max(p.size, max_split)
        i = pool.lower_bound(p.stream, key_size)
        if i == len(pool.keys) or pool.keys[i][0] != p.stream:
            # no single block is large enough: free oversize blocks, largest first
            if i == 0:
                return False
            total_released = 0
            i -= 1  # the largest block of the right stream, if any
            while total_released < key_size and pool.keys[i][1] >= max_split and pool.keys[i][0] == p.stream:
                block = pool.at(i)
                total_released += block.size
                self._release_block(block)
                if i == 0:
                    break
                i -= 1
            if total_released < key_size:
                return False
        else:
            self._release_block(pool.at(i))
        return True

    def _release_cached_blocks(self) -> bool:
        """Wait for record_stream events, then cudaFree every unsplit cached block.
        DeviceCachingAllocator::release_cached_blocks (default pool, no capture underway)."""
        self._synchronize_and_free_events()
        self._release_blocks(self._large)
        self._release_blocks(self._small)
        return True

    def _release_blocks(self, pool: _BlockPool) -> None:
        """DeviceCachingAllocator::release_blocks: frees all non-split blocks of a pool."""
        for key in list(pool.keys):
            block = pool.by_ptr[key[2]]
            if block.prev is None and block.next is None:
                self._release_block(block)

    def _release_block(self, block: _Block) -> None:
        """cudaFree one whole segment. DeviceCachingAllocator::release_block."""
        self.num_device_free += 1
        self._total_allocated_memory -= block.size
        pool = block.pool
        _decrease(pool.stats.segment, 1)
        _decrease(pool.stats.reserved_bytes, block.size)
        if block.size >= self.config.max_split_size_bytes:
            self._oversize_segments.decrease(1)
        pool.erase(block)
        del self._blocks[block.ptr]
        del self._segments[block.ptr]

    def _garbage_collect_cached_blocks(self) -> None:
        """Release old unsplit large blocks above the threshold.
        DeviceCachingAllocator::garbage_collect_cached_blocks."""
        assert self._allowed_memory_maximum is not None
        gc_threshold = int(self.config.garbage_collection_threshold * float(self._allowed_memory_maximum))
        if self._total_allocated_memory <= gc_threshold:
            return
        target_size = self._total_allocated_memory - gc_threshold
        pool = self._large
        total_age = 0
        freeable = 0
        for key in pool.keys:
            b = pool.by_ptr[key[2]]
            if not b.is_split():
                total_age += pool.get_free_blocks_call_count - b.gc_count_base
                freeable += 1
        if freeable == 0:
            return
        reclaimed = 0
        block_freed = True
        while reclaimed < target_size and block_freed and freeable > 0:
            age_threshold = total_age / freeable
            block_freed = False
            for key in list(pool.keys):
                b = pool.by_ptr.get(key[2])
                if b is None or b.is_split():
                    continue
                age = pool.get_free_blocks_call_count - b.gc_count_base
                if age >= age_threshold:
                    block_freed = True
                    reclaimed += b.size
                    total_age -= age
                    freeable -= 1
                    self._release_block(b)

    def _insert_events(self, block: _Block) -> None:
        """One event per stream that used the block. DeviceCachingAllocator::insert_events."""
        for stream in sorted(block.stream_uses):
            self._event_seq += 1
            self._events.setdefault(stream, deque()).append((self._event_seq, block))
            block.event_count += 1
            if self.event_probe is not None:
                self.event_probe.recorded(stream, self._event_seq)
        block.stream_uses.clear()

    def _probe_events(self) -> bool:
        """Ask the probe which pending events the GPU has passed; True if that returned a block.
        Note [Cross-stream frees between syncs]."""
        if self.event_probe is None:
            return False
        for stream, queue in self._events.items():
            done = self._stream_done_seq.get(stream, 0)
            waiting = [seq for seq, _ in queue if seq > done]
            if waiting:
                self._stream_done_seq[stream] = max(done, self.event_probe.completed(stream, waiting))
        return self._process_events()

    def _process_events(self) -> bool:
        """Free blocks whose events have completed; True if a block was freed. DeviceCachingAllocator::process_events."""
        freed = False
        for stream in list(self._events):
            queue = self._events[stream]
            done = self._stream_done_seq.get(stream, 0)
            while queue and queue[0][0] <= done:
                seq, block = queue.popleft()
                self._retire(seq)
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
                    freed = True
            if not queue:
                del self._events[stream]
                self._stream_done_seq.pop(stream, None)
        return freed

    def _synchronize_and_free_events(self) -> None:
        """Block until every event completes, freeing their blocks.
        DeviceCachingAllocator::synchronize_and_free_events."""
        self.num_sync_all_streams += 1
        for queue in self._events.values():
            for seq, block in queue:
                self._retire(seq)
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
        self._events.clear()
        self._stream_done_seq.clear()

    def _retire(self, seq: int) -> None:
        if self.event_probe is not None:
            self.event_probe.retired(seq)

    def _oom_message(self, alloc_size: int) -> str:
        """The text of torch.cuda.OutOfMemoryError. DeviceCachingAllocator::malloc (no private pools)."""
        free, total = self.mem_get_info()
        allocated = self.allocated_bytes
        reserved = self.reserved_bytes
        allowed_info = ""
        if self._allowed_memory_maximum is not None:
            allowed_info = f"{format_size(self._allowed_memory_maximum)} allowed; "
        proc_info = (
            "Including non-PyTorch memory, this process has "
            f"{format_size(self.nvml_context_bytes + reserved)} memory in use. "
        )
        return (
            f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. "
            f"GPU {self.device_index} has a total capacity of {format_size(total)} "
            f"of which {format_size(free)} is free. "
            f"{proc_info}{allowed_info}"
            f"Of the allocated memory {format_size(allocated)} is allocated by PyTorch, "
            f"and {format_size(reserved - allocated)} is reserved by PyTorch but unallocated."
            " If reserved but unallocated memory is large try setting"
            " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
            " fragmentation.  See documentation for Memory Management "
            f" ({OOM_DOCS_URL})"
        )


def _put_stat(out: dict[str, int], prefix: str, stat: Stat) -> None:
    out[f"{prefix}.current"] = stat.current
    out[f"{prefix}.peak"] = stat.peak
    out[f"{prefix}.allocated"] = stat.allocated
    out[f"{prefix}.freed"] = stat.freed
