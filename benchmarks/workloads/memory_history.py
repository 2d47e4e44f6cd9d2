"""Which allocations make the caching allocator reserve new memory, step by step (real GPUs only).

Used by the workload scripts when PHANTORA_BENCH_MEMORY_HISTORY=DIR is set: PyTorch's allocator
history is recorded with Python stacks, and after every step the segments the allocator mapped or
unmapped during that step are listed with the allocation that caused them. Rank R writes
DIR/rank{R}.json = {"steps": [{"step", "reserved", "max_reserved", "allocated", "max_allocated",
"segments": [{"action", "size", "frames"}]}]}. For the question "why does a real run reserve more
after step 8 than a short run" (docs/accuracy.md, Memory).
"""

from __future__ import annotations

import json
import os

import torch

_steps: list[dict] = []
_state = {"seen": 0}
MAX_ENTRIES = 2_000_000
"""Trace entries kept; more than a 12-step run makes, so the trace only grows and new entries are its tail."""


def install() -> None:
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")


def _frames(entry: dict) -> list[str]:
    return [f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}" for f in entry.get("frames", [])[:14]]


def step_end(step: int) -> None:
    """Call after the step's closing synchronize (outside the timed region: a snapshot takes a while)."""
    traces = torch.cuda.memory._snapshot()["device_traces"]
    entries = traces[torch.cuda.current_device()] if traces else []
    fresh, _state["seen"] = entries[_state["seen"]:], len(entries)
    _steps.append({
        "step": step,
        "reserved": torch.cuda.memory_reserved(), "max_reserved": torch.cuda.max_memory_reserved(),
        "allocated": torch.cuda.memory_allocated(), "max_allocated": torch.cuda.max_memory_allocated(),
        "segments": [{"action": e["action"], "size": e["size"], "frames": _frames(e)}
                     for e in fresh if e["action"] in ("segment_alloc", "segment_map", "segment_free",
                                                       "segment_unmap", "oom")],
    })


def dump(out_dir: str, rank: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"steps": _steps}, f)
