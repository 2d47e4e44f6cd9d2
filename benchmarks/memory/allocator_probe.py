"""Probe the real CUDA caching allocator and record what it does, step by step.

Run on a machine with one CUDA GPU:

    python -m benchmarks.memory.allocator_probe --out data/h200/memory/allocator_probe.json

Each scenario runs in a fresh subprocess (fresh allocator state, its own
PYTORCH_CUDA_ALLOC_CONF). A scenario is a list of operations (malloc, free,
record_stream, sleep, synchronize, empty_cache, reset_peak, set_fraction); after
every operation the probe records memory_allocated, memory_reserved, the full
memory_stats() dict, mem_get_info() and a compact memory_snapshot(). An
allocation that raises torch.OutOfMemoryError records the exact message.

The output is replayed into phantora.models.memory by
tests/unit/test_memory_model.py, which requires the same allocated/reserved
after every step. Sizes that depend on the device (near-capacity scenarios) are
computed here at run time and stored as concrete byte counts, so the replay
needs no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

from benchmarks.common.env import write_meta

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
SLEEP_CYCLES = 3_000_000_000  # ~1.5 s at H200 boost clock: keeps a side stream busy


class Recorder:
    """Executes allocator operations on the real GPU and records state after each."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.init()
        self.streams = [torch.cuda.default_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
        self.tensors: dict[str, Any] = {}
        self.steps: list[dict[str, Any]] = []
        self.free_start, self.total = torch.cuda.mem_get_info()

    def free_now(self) -> int:
        return self.torch.cuda.mem_get_info()[0]

    def _record(self, op: dict[str, Any]) -> None:
        torch = self.torch
        segments = []
        for seg in torch.cuda.memory_snapshot():
            segments.append(
                {
                    "address": seg["address"],
                    "total_size": seg["total_size"],
                    "allocated_size": seg["allocated_size"],
                    "active_size": seg["active_size"],
                    "requested_size": seg["requested_size"],
                    "stream": seg["stream"],
                    "segment_type": seg["segment_type"],
                    "blocks": [
                        {
                            "address": b["address"],
                            "size": b["size"],
                            "requested_size": b["requested_size"],
                            "state": b["state"],
                        }
                        for b in seg["blocks"]
                    ],
                }
            )
        free, total = torch.cuda.mem_get_info()
        self.steps.append(
            {
                "op": op,
                "allocated": torch.cuda.memory_allocated(),
                "reserved": torch.cuda.memory_reserved(),
                "stats": dict(torch.cuda.memory_stats()),
                "mem_get_info": [free, total],
                "segments": segments,
            }
        )

    def malloc(self, name: str, nbytes: int, stream: int = 0) -> bool:
        torch = self.torch
        op: dict[str, Any] = {"op": "malloc", "name": name, "nbytes": int(nbytes), "stream": stream}
        try:
            with torch.cuda.stream(self.streams[stream]):
                t = torch.empty(int(nbytes), dtype=torch.uint8, device="cuda")
            self.tensors[name] = t
            op["ptr"] = t.data_ptr()
            ok = True
        except torch.OutOfMemoryError as e:
            op["oom"] = str(e)
            ok = False
        self._record(op)
        return ok

    def free(self, name: str) -> None:
        del self.tensors[name]
        self._record({"op": "free", "name": name})

    def record_stream(self, name: str, stream: int) -> None:
        self.tensors[name].record_stream(self.streams[stream])
        self._record({"op": "record_stream", "name": name, "stream": stream})

    def sleep(self, stream: int, cycles: int = SLEEP_CYCLES) -> None:
        with self.torch.cuda.stream(self.streams[stream]):
            self.torch.cuda._sleep(cycles)
        self._record({"op": "sleep", "stream": stream})

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()
        self._record({"op": "synchronize"})

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()
        self._record({"op": "empty_cache"})

    def reset_peak(self) -> None:
        self.torch.cuda.reset_peak_memory_stats()
        self._record({"op": "reset_peak"})

    def set_fraction(self, fraction: float) -> None:
        self.torch.cuda.set_per_process_memory_fraction(fraction)
        self._record({"op": "set_fraction", "fraction": fraction})


def round_down(n: int, unit: int) -> int:
    return n // unit * unit


# --------------------------------------------------------------------------- scenarios


def sc_rounding_small(r: Recorder) -> None:
    sizes = [0, 1, 511, 512, 513, 1023, 1024, 4096, 100_000, MiB - 1, MiB]
    for i, n in enumerate(sizes):
        r.malloc(f"s{i}", n)
    for i in range(len(sizes)):
        r.free(f"s{i}")
    r.empty_cache()


def sc_rounding_large(r: Recorder) -> None:
    sizes = [MiB + 1, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 20 * MiB, 20 * MiB + 1, 37_123_457, 123_456_789]
    for i, n in enumerate(sizes):
        r.malloc(f"l{i}", n)
    for i in range(len(sizes)):
        r.free(f"l{i}")
    r.malloc("again_10m", 10 * MiB)  # reuses a cached block: which one?
    r.malloc("again_5m", 5 * MiB)
    r.free("again_10m")
    r.free("again_5m")
    r.empty_cache()


def sc_split_merge(r: Recorder) -> None:
    # three 4 MiB blocks split out of one 20 MiB segment
    r.malloc("a", 4 * MiB)
    r.malloc("b", 4 * MiB)
    r.malloc("c", 4 * MiB)
    r.free("b")  # hole in the middle: inactive split
    r.free("a")  # merges with b
    r.malloc("d", 6 * MiB)  # fits in merged 8 MiB; remainder 2 MiB > 1 MiB -> split
    r.malloc("e", 7 * MiB + 512)  # 8 MiB tail left after c: remainder <= 1 MiB? 8-7.0005
    r.free("c")
    r.free("d")
    r.free("e")  # all merge back: one free 20 MiB block
    r.malloc("f", 19 * MiB)  # remainder 1 MiB, not > kSmallSize: no split
    r.free("f")
    # small pool: 600 KB blocks, three per 2 MiB segment
    for i in range(7):
        r.malloc(f"k{i}", 600_000)
    for i in (1, 3, 5):
        r.free(f"k{i}")
    r.malloc("k_big", 1_000_000)  # no hole big enough: new small segment
    r.malloc("k_fit", 500_000)  # fits a hole
    r.empty_cache()  # only fully free segments go
    for i in (0, 2, 4, 6):
        r.free(f"k{i}")
    r.free("k_big")
    r.free("k_fit")
    r.empty_cache()


def sc_best_fit(r: Recorder) -> None:
    # segments of distinct sizes; free some; check which block serves a request
    sizes = [12 * MiB, 14 * MiB, 16 * MiB, 12 * MiB, 30 * MiB, 14 * MiB]
    for i, n in enumerate(sizes):
        r.malloc(f"b{i}", n)
    for i in (0, 2, 3, 4):
        r.free(f"b{i}")
    r.malloc("x11", 11 * MiB)  # best fit: a 12 MiB block (lowest address of the two)
    r.malloc("x13", 13 * MiB)  # 12 left? no: 16 MiB block; remainder 3 MiB -> split
    r.malloc("x2", 2 * MiB)  # <10 MiB: smallest free block >= 2 MiB is the 3 MiB tail
    r.malloc("x25", 25 * MiB)  # 30 MiB block, remainder 5 MiB -> split
    r.malloc("x12", 12 * MiB)  # second 12 MiB block
    for name in ("x11", "x13", "x2", "x25", "x12", "b1", "b5"):
        r.free(name)
    r.empty_cache()


def sc_fragmentation(r: Recorder) -> None:
    # interleaved allocations and frees of mixed sizes, like activations in a step
    sizes = [3 * MiB, 9 * MiB, 2_500_000, 17 * MiB, 5 * MiB, 40 * MiB, 700 * KiB, 8 * MiB + 3, 33 * MiB + 7, 6 * MiB]
    live: list[str] = []
    k = 0
    for rnd in range(3):
        for j, n in enumerate(sizes):
            name = f"f{k}"
            k += 1
            r.malloc(name, n + rnd * 512 * KiB)
            live.append(name)
            if j % 3 == 2:
                r.free(live.pop(0))
        for name in live[::2]:
            r.free(name)
        live = live[1::2]
    for name in live:
        r.free(name)
    r.empty_cache()


def sc_two_streams(r: Recorder) -> None:
    r.malloc("a1", 40 * MiB, stream=1)
    r.free("a1")  # cached on stream 1
    r.malloc("b0", 60 * MiB, stream=0)
    r.free("b0")  # cached on stream 0
    r.malloc("c0", 30 * MiB, stream=0)  # stream-first ordering: reuse b0's block; size-first: new segment
    r.malloc("d1", 50 * MiB, stream=1)  # nothing on stream 1 fits: new segment
    r.malloc("e1", 20 * MiB, stream=1)  # 40 MiB block on stream 1
    r.malloc("f2", 4 * MiB, stream=2)  # a third stream gets its own 20 MiB segment
    r.malloc("g2", 100_000, stream=2)  # small pool, own stream
    r.malloc("h0", 100_000, stream=0)
    for name in ("c0", "d1", "e1", "f2", "g2", "h0"):
        r.free(name)
    r.empty_cache()


def sc_record_stream(r: Recorder) -> None:
    r.malloc("a", 30 * MiB, stream=0)
    r.record_stream("a", 0)  # the allocation stream: ignored
    r.sleep(1)
    r.record_stream("a", 1)
    r.free("a")  # stays active until stream 1's work is done
    r.malloc("b", 30 * MiB, stream=0)  # cannot reuse a's block: new segment
    r.synchronize()
    r.malloc("c", 1000, stream=0)  # process_events frees a's block now
    r.malloc("d", 30 * MiB, stream=0)  # reuses a's block
    r.sleep(1)
    r.record_stream("d", 1)
    r.record_stream("d", 2)
    r.free("d")
    r.empty_cache()  # synchronizes and frees d, then releases its segment
    r.free("b")
    r.free("c")
    r.sleep(2)
    r.malloc("e", 300_000, stream=0)
    r.record_stream("e", 2)
    r.free("e")
    r.malloc("f", 300_000, stream=0)  # e still in use by stream 2: different block
    r.synchronize()
    r.free("f")
    r.empty_cache()


def sc_reset_peak(r: Recorder) -> None:
    r.malloc("a", 100 * MiB)
    r.malloc("b", 3 * MiB)
    r.free("a")
    r.reset_peak()
    r.malloc("c", 50 * MiB)  # reuses a's block, split
    r.free("c")
    r.free("b")
    r.empty_cache()
    r.reset_peak()


def sc_oom_retry(r: Recorder) -> None:
    free0 = r.free_now()
    half = round_down(free0 // 2, 2 * MiB) - 100 * MiB
    r.malloc("a", half)
    r.malloc("b", half)
    r.malloc("s", 2 * MiB)  # 20 MiB segment, 18 MiB reserved but unallocated
    r.free("a")  # a's segment cached
    r.malloc("c", half + 40 * MiB)  # cudaMalloc fails; free cached blocks; retry succeeds
    r.malloc("d", 1 * GiB)  # OOM
    r.malloc("e", 30 * MiB)  # still room
    r.free("e")
    r.malloc("f", round_down(r.free_now(), 2 * MiB) + 16 * MiB)  # needs e's cached block + a bit: OOM
    r.free("b")
    r.free("c")
    r.free("s")
    r.empty_cache()


def sc_capacity(r: Recorder) -> None:
    free0 = r.free_now()
    lo = round_down(free0, 2 * MiB) - 512 * MiB  # assumed to fit
    hi = round_down(free0, 2 * MiB) + 64 * MiB  # assumed not to fit
    assert r.malloc("lo", lo)
    r.free("lo")
    r.empty_cache()
    while hi - lo > 2 * MiB:
        mid = round_down((lo + hi) // 2, 2 * MiB)
        if r.malloc("mid", mid):
            lo = mid
            r.free("mid")
            r.empty_cache()
        else:
            hi = mid


def sc_max_split(r: Recorder) -> None:
    # PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64
    r.malloc("a", 100 * MiB)
    r.free("a")  # oversize cached block
    r.malloc("b", 90 * MiB)  # 100 < 90 + 20: reused whole, not split
    r.free("b")
    r.malloc("c", 70 * MiB)  # 100 >= 70 + 20: new segment
    r.malloc("d", 30 * MiB)  # < max_split: may not take an oversize block
    r.malloc("e", 5 * MiB)
    r.free("c")
    r.free("d")
    r.free("e")
    # fill the device, then ask for more than is free: release oversize blocks
    r.malloc("fill", round_down(r.free_now(), 2 * MiB) - 200 * MiB)
    r.malloc("g", round_down(r.free_now(), 2 * MiB) + 150 * MiB)  # releases 100 + 70
    r.malloc("h", 300 * MiB)  # OOM
    r.free("g")
    r.free("fill")
    r.empty_cache()


def sc_roundup_power2(r: Recorder) -> None:
    # PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4
    sizes = [1200, 3000, 700_000, MiB + 1, 5 * MiB + 1, 12 * MiB + 1, 100 * MiB + 1]
    for i, n in enumerate(sizes):
        r.malloc(f"p{i}", n)
    for i in range(len(sizes)):
        r.free(f"p{i}")
    r.empty_cache()


def sc_roundup_power2_list(r: Recorder) -> None:
    # PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,512:2,1024:4,>:8]
    sizes = [3000, 2 * MiB + 1, 300 * MiB + 1, 600 * MiB + 1, 1536 * MiB + 1, 3 * GiB + 1]
    for i, n in enumerate(sizes):
        r.malloc(f"q{i}", n)
    for i in range(len(sizes)):
        r.free(f"q{i}")
    r.empty_cache()


def sc_fraction_gc(r: Recorder) -> None:
    # PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.5
    r.set_fraction(0.1)
    r.malloc("a", 2 * GiB)
    r.malloc("b", 2 * GiB)
    r.malloc("c", 2 * GiB)
    r.free("a")
    r.free("b")
    r.malloc("d", 3 * GiB)  # total 6 GiB <= threshold: no GC, new segment
    r.malloc("e", 3 * GiB)  # 9 GiB > threshold: GC releases aged blocks first
    r.malloc("f", 1 * GiB)
    r.malloc("g", 8 * GiB)  # over the allowed fraction: OOM naming "allowed"
    for name in ("c", "d", "e", "f"):
        r.free(name)
    r.empty_cache()


SCENARIOS: dict[str, tuple[str | None, Callable[[Recorder], None]]] = {
    "rounding_small": (None, sc_rounding_small),
    "rounding_large": (None, sc_rounding_large),
    "split_merge": (None, sc_split_merge),
    "best_fit": (None, sc_best_fit),
    "fragmentation": (None, sc_fragmentation),
    "two_streams": (None, sc_two_streams),
    "record_stream": (None, sc_record_stream),
    "reset_peak": (None, sc_reset_peak),
    "oom_retry": (None, sc_oom_retry),
    "capacity": (None, sc_capacity),
    "max_split": ("max_split_size_mb:64", sc_max_split),
    "roundup_power2": ("roundup_power2_divisions:4", sc_roundup_power2),
    "roundup_power2_list": ("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", sc_roundup_power2_list),
    "fraction_gc": ("garbage_collection_threshold:0.5", sc_fraction_gc),
}


def run_one(name: str) -> dict[str, Any]:
    """Run one scenario in this process (called in the child)."""
    conf, fn = SCENARIOS[name]
    r = Recorder()
    import torch

    props = torch.cuda.get_device_properties(0)
    error = None
    try:
        fn(r)
    except Exception as e:  # keep what was recorded; say what broke
        error = f"{type(e).__name__}: {e}"
    return {
        "conf": conf,
        "streams": [s.cuda_stream for s in r.streams],
        "mem_get_info_start": [r.free_start, r.total],
        "total_memory": props.total_memory,
        "steps": r.steps,
        "error": error,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenario", help="internal: run one scenario and write its JSON to --out")
    ap.add_argument("--only", nargs="*", help="run only these scenarios")
    args = ap.parse_args()

    if args.scenario:
        result = run_one(args.scenario)
        with open(args.out, "w") as f:
            json.dump(result, f)
        return
    write_meta(os.path.dirname(os.path.abspath(args.out)), __file__)

    import torch

    meta = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "created_unix_s": int(time.time()),
    }
    out: dict[str, Any] = {"meta": meta, "scenarios": {}}
    tmp = args.out + ".part"
    for name in args.only or list(SCENARIOS):
        conf, _ = SCENARIOS[name]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.pop("PYTORCH_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        t0 = time.time()
        proc = subprocess.run(
            [sys.executable, __file__, "--scenario", name, "--out", tmp],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        if proc.returncode != 0:
            out["scenarios"][name] = {"conf": conf, "error": proc.stderr[-4000:], "steps": []}
        else:
            with open(tmp) as f:
                out["scenarios"][name] = json.load(f)
        err = out["scenarios"][name].get("error")
        print(f"{name}: {len(out['scenarios'][name]['steps'])} steps, {time.time() - t0:.1f} s, error={err}", flush=True)
    if os.path.exists(tmp):
        os.remove(tmp)
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
