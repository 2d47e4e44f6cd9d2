"""What one rank process measured, written to `<out>/rank<N>/result.json` when it ends."""

from __future__ import annotations

import json
import resource
from pathlib import Path
from typing import Any

from phantora.profiler.oplog import OPS_FILE, write_ops
from phantora.runtime.session import Session



def collect_rank_result(session: Session, *, exit_code: int) -> dict[str, Any]:
    """The rank's own statistics; GPU timing lives in the coordinator, which the launcher reports."""
    stats = session.stats
    usage = resource.getrusage(resource.RUSAGE_SELF)
    devices = []
    for index, allocator in enumerate(session.allocators):
        mem = allocator.memory_stats()
        devices.append({
            "index": index,
            "peak_allocated_bytes": allocator.run_peak_allocated_bytes,  # not reset by the program's resets
            "peak_reserved_bytes": allocator.run_peak_reserved_bytes,
            "allocated_bytes": mem["allocated_bytes.all.current"],
            "reserved_bytes": mem["reserved_bytes.all.current"],
            "num_ooms": mem.get("num_ooms", 0),
            "num_alloc_retries": mem.get("num_alloc_retries", 0),
        })
    return {
        "rank": session.config.rank,
        "gpu": session.gpu.key,
        "gpu_name": session.gpu.name,
        "exit_code": exit_code,
        "host_ns": session.now_ns(),
        "host_time": session.config.host_time,
        "host_time_measured_ns": session.host_timer.charged_ns if session.host_timer is not None else 0,
        "devices": devices,
        "kernels": stats.kernels,
        "host_only_ops": stats.host_only_ops,
        "ops_in_library_python": stats.ops_in_library_python,
        "ops_without_elements": stats.ops_without_elements,
        "subclass_ops": stats.subclass_ops,
        "subclass_backward_ops": stats.subclass_backward_ops,
        "async_collective_ops": stats.async_collective_ops,
        "gemm_problems": stats.gemm_problems,
        "gemm_kernel_loads": stats.gemm_kernel_loads,
        "flops": stats.flops,
        "bytes_moved": stats.bytes_moved,
        "kernel_ns_by_class": dict(stats.kernel_ns_by_class),
        "host_ns_by_term": dict(stats.host_ns_by_term),
        "kernel_sources": dict(stats.kernel_sources),
        "kernel_ns_by_source": dict(stats.kernel_ns_by_source),
        "generic_ops": dict(stats.generic_ops),
        "placeholders": dict(stats.placeholders),
        "compiled": dict(stats.compiled),
        "warnings": list(stats.warnings),
        # the process's own CPU from the OS: the virtual clock may stand in for time.process_time, and a rank
        # forked from the fork server starts counting at its fork
        "simulator_cpu_s": usage.ru_utime + usage.ru_stime,
        "simulator_peak_rss_bytes": usage.ru_maxrss * 1024,
    }


def downsample_memory(samples: list[tuple[int, int, int, int]], buckets: int = 2000) -> dict[str, list]:
    """Device 0's memory over time, at most `buckets` points, keeping each bucket's maximum (peaks survive)."""
    points = [(t, a, r) for t, d, a, r in samples if d == 0]
    if not points:
        return {"time_s": [], "allocated_bytes": [], "reserved_bytes": []}
    end = max(points[-1][0], 1)
    merged: dict[int, tuple[int, int, int]] = {}
    for t, a, r in points:
        b = t * buckets // (end + 1)
        old = merged.get(b)
        merged[b] = (t, max(a, old[1]), max(r, old[2])) if old else (t, a, r)
    rows = [merged[b] for b in sorted(merged)]
    return {"time_s": [t / 1e9 for t, _, _ in rows], "allocated_bytes": [a for _, a, _ in rows],
            "reserved_bytes": [r for _, _, r in rows]}


def write_rank_result(session: Session, *, exit_code: int) -> Path:
    out = session.config.rank_dir
    out.mkdir(parents=True, exist_ok=True)
    path = out / "result.json"
    path.write_text(json.dumps(collect_rank_result(session, exit_code=exit_code), indent=1))
    (out / "memory.json").write_text(json.dumps(downsample_memory(session.memory_samples)))
    write_ops(out / OPS_FILE, session.op_log.records(), gpu=session.gpu.key, rank=session.config.rank)
    return path
