"""The run summary: a table on the terminal, `summary.json`, and `report.png`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from phantora.config.run import RankConfig
from phantora.specs import get_gpu_spec
from phantora.units import GiB, NS_PER_S


def _load_rank_results(out_dir: Path) -> list[dict[str, Any]]:
    results = []
    for path in sorted(out_dir.glob("rank*/result.json"), key=lambda p: int(p.parent.name[4:])):
        results.append(json.loads(path.read_text()))
    return results


def build_summary(config: RankConfig, out_dir: Path, *, exit_code: int, wall_s: float) -> dict[str, Any]:
    """Aggregate what the ranks wrote; works with partial results (a crashed or OOM run)."""
    gpu = get_gpu_spec(config.gpu)
    ranks = _load_rank_results(out_dir)
    summary: dict[str, Any] = {
        "gpu": gpu.key, "gpu_name": gpu.name, "exit_code": exit_code, "complete": exit_code == 0,
        "ranks": len(ranks), "simulator_wall_s": round(wall_s, 3),
    }
    if not ranks:
        summary["error"] = "no rank wrote results (the program failed before Phantora could report)"
        return summary
    first = ranks[0]
    sim_ns = max(r["simulated_ns"] for r in ranks)
    busy_ns = first["devices"][0]["busy_ns"] if first["devices"] else 0
    peak_bf16 = gpu.peak_flops.get("bf16", 0.0)
    achieved = first["flops"] / (sim_ns / NS_PER_S) if sim_ns else 0.0
    summary.update({
        "simulated_time_s": sim_ns / NS_PER_S,
        "gpu_busy_fraction": busy_ns / sim_ns if sim_ns else 0.0,
        "host_blocked_s": first["host_blocked_ns"] / NS_PER_S,
        "flops": first["flops"],
        "achieved_tflops": achieved / 1e12,
        "mfu_vs_bf16_peak": achieved / peak_bf16 if peak_bf16 else None,
        "peak_allocated_gib": max(d["peak_allocated_bytes"] for r in ranks for d in r["devices"]) / GiB,
        "peak_reserved_gib": max(d["peak_reserved_bytes"] for r in ranks for d in r["devices"]) / GiB,
        "ooms": sum(d["num_ooms"] for r in ranks for d in r["devices"]),
        "kernels": first["kernels"],
        "host_only_ops": first["host_only_ops"],
        "kernel_time_s_by_class": {k: v / NS_PER_S for k, v in sorted(
            first["kernel_ns_by_class"].items(), key=lambda kv: -kv[1])},
        "kernel_sources": first["kernel_sources"],
        "generic_ops": first["generic_ops"],
        "placeholder_reads": first["placeholders"],
        "warnings": sorted({w for r in ranks for w in r["warnings"]}),
        "simulator_cpu_s": round(max(r["simulator_cpu_s"] for r in ranks), 3),
        "simulator_peak_rss_gib": max(r["simulator_peak_rss_bytes"] for r in ranks) / GiB,
    })
    return summary


def write_summary(summary: dict[str, Any], out_dir: Path) -> None:
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    if summary.get("kernel_time_s_by_class"):
        from phantora.reports.plots import write_report_png
        write_report_png(summary, out_dir)


def print_summary(summary: dict[str, Any], *, file: TextIO) -> None:
    rows: list[tuple[str, str]] = [("GPU", f"{summary['gpu_name']} ({summary['gpu']})")]
    if "simulated_time_s" in summary:
        rows += [
            ("simulated time", f"{summary['simulated_time_s']:.4f} s"),
            ("GPU busy", f"{100 * summary['gpu_busy_fraction']:.1f} %"),
            ("FLOPs / achieved", f"{summary['flops']:.3e} / {summary['achieved_tflops']:.1f} TFLOP/s"),
        ]
        if summary["mfu_vs_bf16_peak"] is not None:
            rows.append(("MFU (bf16 peak)", f"{100 * summary['mfu_vs_bf16_peak']:.1f} %"))
        rows += [
            ("peak memory", f"{summary['peak_allocated_gib']:.2f} GiB allocated, "
                            f"{summary['peak_reserved_gib']:.2f} GiB reserved"),
            ("ops intercepted", f"{summary['kernels']} kernels, {summary['host_only_ops']} host-only"),
        ]
        top = list(summary["kernel_time_s_by_class"].items())[:5]
        rows.append(("kernel time", ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in top)))
        if summary["generic_ops"]:
            rows.append(("unmodelled ops", ", ".join(f"{k} x{v}" for k, v in summary["generic_ops"].items())))
        if summary["ooms"]:
            rows.append(("out of memory", f"{summary['ooms']} time(s)"))
        rows.append(("simulator", f"{summary['simulator_wall_s']:.1f} s wall, "
                                  f"{summary['simulator_peak_rss_gib']:.2f} GiB peak RSS"))
    for warning in summary.get("warnings", []):
        rows.append(("warning", warning))
    if "error" in summary:
        rows.append(("error", summary["error"]))
    width = max(len(k) for k, _ in rows)
    print("\n== Phantora summary " + "=" * 40, file=file)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}", file=file)
    print("=" * 60, file=file)
