"""Pictures of a run: `report.png` (where the time went, per rank, and memory) and `timeline.png`
(compute, communication and host blocking of every rank over simulated time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from phantora.reports.breakdown import CoordinatorState, rank_timeline

_MAX_TIMELINE_RANKS = 64
"""More lanes than this are unreadable; the first ones are drawn and the title says so."""
_TIMELINE_RESOLUTION = 4000
"""Intervals closer than 1/this of the run are drawn as one (keeps million-kernel runs drawable)."""
_COLORS = {"compute": "#4c72b0", "overlapped": "#8fbc8f", "exposed": "#dd8452", "idle": "#e5e5e5",
           "blocked": "#999999", "sleep": "#d9c27a"}


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_report_png(summary: dict[str, Any], out_dir: Path) -> Path:
    plt = pyplot()
    memory = _load_memory(out_dir)
    panels = 3 if memory else 2
    fig, axes = plt.subplots(panels, 1, figsize=(9, 3.4 * panels))
    _kernel_classes(axes[0], summary)
    _rank_breakdown(axes[1], summary)
    if memory:
        _memory(axes[2], memory)
    fig.tight_layout()
    path = out_dir / "report.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _kernel_classes(ax, summary: dict[str, Any]) -> None:
    by_class = summary["kernel_time_s_by_class"]
    names = list(by_class)[::-1]
    ax.barh(names, [1e3 * by_class[n] for n in names], color=_COLORS["compute"])
    ax.set_xlabel("simulated GPU time, all ranks (ms)")
    ax.set_title(f"Where the GPU time went — {summary['world_size']} x {summary['gpu_name']}, "
                 f"{summary['simulated_time_s']:.3f} s simulated")


def _rank_breakdown(ax, summary: dict[str, Any]) -> None:
    """Per rank: compute only, communication overlapped by compute, exposed communication, idle, and the run's
    sleep (breakdown Note [The program's own sleep])."""
    rows = summary["per_rank"][:_MAX_TIMELINE_RANKS]
    total_ms = 1e3 * summary["simulated_time_s"]
    labels = [str(r["rank"]) for r in rows]
    parts = {
        "compute": [1e3 * (r["compute_s"] - (r["nccl_s"] - r["exposed_comm_s"])) for r in rows],
        "overlapped": [1e3 * (r["nccl_s"] - r["exposed_comm_s"]) for r in rows],
        "exposed": [1e3 * r["exposed_comm_s"] for r in rows],
    }
    parts["idle"] = [max(total_ms - 1e3 * summary.get("asleep_s", 0.0) - sum(p[i] for p in parts.values()), 0.0)
                     for i in range(len(rows))]
    parts["sleep"] = [1e3 * summary.get("asleep_s", 0.0)] * len(rows)
    left = [0.0] * len(rows)
    names = {"compute": "compute only", "overlapped": "communication under compute",
             "exposed": "exposed communication", "idle": "idle", "sleep": "program sleep"}
    for key, values in parts.items():
        ax.barh(labels, values, left=left, color=_COLORS[key], label=names[key])
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("rank")
    ax.set_title("GPU time per rank")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=5, fontsize="small", frameon=False)


def _load_memory(out_dir: Path) -> dict[str, list] | None:
    """Rank 0's memory.json (runtime/rank_result.py: time_s, allocated_bytes, reserved_bytes), if usable."""
    try:
        memory = json.loads((out_dir / "rank0" / "memory.json").read_text())
        times = memory["time_s"]
        if times and len(times) == len(memory["reserved_bytes"]) == len(memory["allocated_bytes"]):
            return memory
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _memory(ax, memory: dict[str, list]) -> None:
    times, reserved, allocated = memory["time_s"], memory["reserved_bytes"], memory["allocated_bytes"]
    gib = 1024**3
    ax.plot(times, [r / gib for r in reserved], label="reserved", color="#dd8452")
    ax.plot(times, [a / gib for a in allocated], label="allocated", color="#4c72b0")
    ax.set_xlabel("simulated host time (s) at which allocations are issued")
    ax.set_ylabel("GPU memory (GiB)")
    ax.set_title("GPU memory over time (rank 0, device 0)")
    ax.legend(loc="lower right")


def write_timeline_png(summary: dict[str, Any], coordinator: CoordinatorState, out_dir: Path) -> Path:
    """One lane per rank: compute (top half), NCCL calls exposed/overlapped (bottom half), host blocked or the
    program asleep (a line)."""
    plt = pyplot()
    ranks = list(coordinator.representatives)
    world = len(ranks)
    shown = min(world, _MAX_TIMELINE_RANKS)
    sim_ns = max(int(summary["simulated_time_s"] * 1e9), 1)
    gap_ns = sim_ns // _TIMELINE_RESOLUTION
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.45 * shown))
    for i, rank in enumerate(ranks[:shown]):
        t = rank_timeline(coordinator, rank, gap_ns=gap_ns)
        y = shown - 1 - i
        ax.broken_barh(_ms(t.compute), (y + 0.5, 0.4), color=_COLORS["compute"])
        ax.broken_barh(_ms(t.communication), (y + 0.08, 0.4), color=_COLORS["overlapped"])
        ax.broken_barh(_ms(t.exposed_communication), (y + 0.08, 0.4), color=_COLORS["exposed"])
        ax.broken_barh(_ms(t.host_blocked), (y + 0.0, 0.06), color=_COLORS["blocked"])
        ax.broken_barh(_ms(t.sleeps), (y + 0.0, 0.06), color=_COLORS["sleep"])
    ax.set_yticks([shown - 1 - i + 0.5 for i in range(shown)], [f"rank {r}" for r in ranks[:shown]])
    ax.set_ylim(0, shown)
    ax.set_xlim(0, sim_ns / 1e6)
    ax.set_xlabel("simulated time (ms)")
    more = f" (first {shown} of {world} ranks)" if shown < world else ""
    ax.set_title(f"Timeline{more}: compute (top), NCCL exposed / under compute (bottom), host blocked or asleep "
                 "(line)")
    kinds = ("compute", "exposed", "overlapped", "blocked", "sleep")
    handles = [plt.Rectangle((0, 0), 1, 1, color=_COLORS[k]) for k in kinds]
    ax.legend(handles, ["compute", "NCCL exposed", "NCCL under compute", "host blocked", "program sleep"],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / shown), fontsize="small", ncols=5, frameon=False)
    fig.tight_layout()
    path = out_dir / "timeline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ms(intervals: list[tuple[int, int]]) -> list[tuple[float, float]]:
    return [(s / 1e6, (e - s) / 1e6) for s, e in intervals]
