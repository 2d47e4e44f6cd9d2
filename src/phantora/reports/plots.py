"""Pictures of a run: where the GPU time went, and GPU memory over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_report_png(summary: dict[str, Any], out_dir: Path) -> Path:
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_class = summary["kernel_time_s_by_class"]
    fig, (ax, mem_ax) = plt.subplots(2, 1, figsize=(8, 6.5))
    names = list(by_class)[::-1]
    ax.barh(names, [1e3 * by_class[n] for n in names], color="#4c72b0")
    ax.set_xlabel("simulated kernel time (ms)")
    ax.set_title(f"Where the GPU time went — {summary['gpu_name']}, "
                 f"{summary['simulated_time_s']:.3f} s simulated")
    memory_path = out_dir / "rank0" / "memory.json"
    if memory_path.exists():
        memory = json.loads(memory_path.read_text())
        gib = 1024**3
        mem_ax.plot(memory["time_s"], [r / gib for r in memory["reserved_bytes"]], label="reserved", color="#dd8452")
        mem_ax.plot(memory["time_s"], [a / gib for a in memory["allocated_bytes"]], label="allocated", color="#4c72b0")
        mem_ax.set_xlabel("simulated host time (s) at which allocations are issued")
        mem_ax.set_ylabel("GPU memory (GiB)")
        mem_ax.set_title("GPU memory over time (rank 0, device 0)")
        mem_ax.legend(loc="lower right")
    fig.tight_layout()
    path = out_dir / "report.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
