"""Chrome/Perfetto trace (`trace.json`) of the simulated kernels: one track per stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from phantora.engine.timeline import KernelSpan


def trace_events(spans: Iterable[KernelSpan], *, pid: int) -> list[dict]:
    events: list[dict] = []
    streams: set[tuple[int, int]] = set()
    for span in spans:
        streams.add(span.stream)
        events.append({
            "name": span.name, "cat": span.kernel_class, "ph": "X", "pid": pid,
            "tid": f"cuda:{span.stream[0]} stream {span.stream[1]}",
            "ts": span.start_ns / 1000, "dur": (span.end_ns - span.start_ns) / 1000,
            "args": {"flops": span.flops, "bytes": span.bytes_moved, "launch_us": span.launch_ns / 1000},
        })
    events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {pid}"}})
    return events


def write_chrome_trace(path: Path, spans: Iterable[KernelSpan], *, pid: int) -> None:
    path.write_text(json.dumps({"traceEvents": trace_events(spans, pid=pid), "displayTimeUnit": "ms"}))
