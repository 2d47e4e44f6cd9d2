"""Host time of a CUDA event record from Python, against a plain kernel op, on one GPU (issue 4).

The layer timelines (benchmarks/workloads/timeline.py) record a new `torch.cuda.Event(enable_timing=True)` at
every mark; the simulation charges no host time for event records. How much does a mark cost the real host,
compared with a small kernel op issued from Python? Each variant runs N times back to back, 5 rounds
interleaved; prints one JSON line per variant with the per-call median over rounds (µs).

    python -m benchmarks.host.measure_marks [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=2000)
    n = p.parse_args().n
    x = torch.ones(256, device="cuda")
    reused = torch.cuda.Event(enable_timing=True)
    marks: list = []

    def add_one():
        nonlocal x
        x = x + 1

    def new_event_record():  # what timeline._record does
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        marks.append(("label", time.perf_counter_ns(), event))

    variants = {
        "add_one": add_one,
        "new_event_record": new_event_record,
        "reused_event_record": lambda: reused.record(),
        "current_stream": torch.cuda.current_stream,
        "new_event": lambda: torch.cuda.Event(enable_timing=True),
        "perf_counter_ns": time.perf_counter_ns,
    }
    per_call: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(5):
        for name, fn in variants.items():
            torch.cuda.synchronize()
            marks.clear()
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            per_call[name].append((time.perf_counter_ns() - t0) / n / 1e3)
            torch.cuda.synchronize()
    marks.clear()
    for name, values in per_call.items():
        print(json.dumps({"variant": name, "us_per_call": round(statistics.median(values), 2),
                          "rounds": [round(v, 2) for v in values], "n": n}))


if __name__ == "__main__":
    main()
