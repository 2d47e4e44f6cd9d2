"""The run summary: a table on the terminal, `summary.json`, `trace.json`, `report.png`, `timeline.png`,
`report.html` (reports/html.py).

Two sources, each for what it alone knows:
- the coordinator (GPU side, every rank, also for a run that stopped early): simulated time, busy
  time, compute vs NCCL vs exposed communication, host blocking, kernel time by class, FLOPs;
- each rank's `<out>/rank<N>/result.json` (what the rank process measured itself; missing for a
  rank that crashed hard): memory peaks and OOMs, host-only op counts, kernel sources, unmodelled
  ops, placeholder reads, warnings, its own host clock at exit. The keys read are `RESULT_KEYS`.
Wall time, CPU time and peak RSS of every process come from the launcher (wait4), so they are
known even for ranks that wrote nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

from phantora.models.gpu import GpuSpec
from phantora.models.host_contention import DEFAULT_HOST_CONTENTION
from phantora.models.network import ClusterNetworkConfig
from phantora.reports.breakdown import CoordinatorState, RankBreakdown, asleep_intervals, length, rank_breakdown
from phantora.specs.profile import PART_NAMES
from phantora.units import NS_PER_S, GiB

RESULT_KEYS = ("rank", "exit_code", "host_ns", "devices", "host_only_ops", "subclass_ops", "ops_in_library_python",
               "ops_without_elements", "gemm_problems", "gemm_kernel_loads", "kernel_sources", "kernel_ns_by_source",
               "generic_ops", "placeholders", "compiled", "warnings", "simulator_cpu_s", "simulator_peak_rss_bytes",
               "host_time_measured_ns")
"""What the summary reads from a rank's result.json (all optional); `devices` is a list of
{"peak_allocated_bytes", "peak_reserved_bytes", "num_ooms"}."""
_PER_RANK_ROWS = 16
"""Per-rank lines printed at most (summary.json has all)."""


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """What the OS says a rank process used (from wait4 when it ended)."""

    rank: int
    peak_rss_bytes: int
    cpu_s: float


def load_rank_results(out_dir: Path, ranks: Iterable[int]) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Each rank's result.json that exists and parses, and a warning for each one that does not parse."""
    results: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for rank in ranks:
        path = out_dir / f"rank{rank}" / "result.json"
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as error:
            problems.append(f"rank {rank}'s result.json is unreadable ({error}); its statistics are missing")
            continue
        results[rank] = data
    return results, problems


def _devices(result: dict[str, Any]) -> list[dict[str, Any]]:
    devices = result.get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _compile(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the ranks compiled (runtime/inductor.py), summed over ranks; None if nothing was compiled. Compilation
    time is not predicted: `compilation_time_predicted` says so for readers of summary.json."""
    counts = _counter(results, "compiled")
    if not counts:
        return None
    eager = {k.removeprefix("eager: "): v for k, v in counts.items() if k.startswith("eager: ")}
    return {"regions": counts.get("regions", 0), "graphs": counts.get("graphs", 0), "kernels": counts.get("kernels", 0),
            "eager_regions": eager, "compilation_time_predicted": False}


def _compile_row(c: dict[str, Any]) -> str:
    """"3 regions, 6 graphs as 140 Inductor kernels; compilation time not predicted; 1 region eager (why)"."""
    text = (f"{c['regions']} region(s), {c['graphs']} graph(s) as {c['kernels']} Inductor kernels; "
            "compilation time not predicted")
    if c["eager_regions"]:
        text += "; eager: " + ", ".join(f"{why} x{n}" for why, n in c["eager_regions"].items())
    return text


def _host_work(results: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds of host time the host model charged a rank, by its term, the mean over the ranks that reported, the
    largest first (runtime/session.py `OpStats.host_ns_by_term`)."""
    counted = [r for r in results if isinstance(r.get("host_ns_by_term"), dict)]  # not a killed rank's
    if not counted:
        return {}
    total = _counter(counted, "host_ns_by_term")
    return {term: ns / len(counted) / NS_PER_S for term, ns in total.items()}


def _shares(totals: Mapping[str, float]) -> dict[str, float]:
    """Each key's share of the total, largest first; {} for nothing."""
    whole = sum(totals.values())
    return {k: v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])} if whole else {}


def _counter(results: list[dict[str, Any]], key: str) -> dict[str, int]:
    total: Counter = Counter()
    for r in results:
        value = r.get(key)
        if isinstance(value, dict):
            total.update({k: v for k, v in value.items() if isinstance(v, (int, float))})
    return dict(total.most_common())


def _rank_row(b: RankBreakdown, awake_ns: int, result: dict[str, Any] | None) -> dict[str, Any]:
    """`awake_ns`: the simulated time the run did not sleep (breakdown Note [The program's own sleep])."""
    devices = _devices(result or {})
    return {
        "rank": b.rank,
        "end_s": b.end_ns / NS_PER_S,
        "busy_fraction": b.busy_ns / awake_ns if awake_ns else 0.0,
        "compute_s": b.compute_ns / NS_PER_S,
        "nccl_s": b.nccl_ns / NS_PER_S,
        "exposed_comm_s": b.exposed_comm_ns / NS_PER_S,
        "nccl_wait_s": b.nccl_wait_ns / NS_PER_S,
        "host_blocked_s": b.host_blocked_ns / NS_PER_S,
        "sleep_s": b.sleep_ns / NS_PER_S,
        "kernels": b.kernels,
        "nccl_calls": b.nccl_calls,
        "flops": b.flops,
        "peak_allocated_gib": max((d.get("peak_allocated_bytes", 0) for d in devices), default=0) / GiB,
        "peak_reserved_gib": max((d.get("peak_reserved_bytes", 0) for d in devices), default=0) / GiB,
        "ooms": sum(d.get("num_ooms", 0) for d in devices),
        "reported": result is not None,
        "exit_code": None if result is None else result.get("exit_code"),
    }


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else 0.0


def build_summary(*, coordinator: CoordinatorState, gpu: GpuSpec, cluster: ClusterNetworkConfig, world_size: int,
                  out_dir: Path, representatives: Sequence[int] | None = None, exit_code: int, complete: bool, wall_s: float,
                  processes: list[ProcessUsage],
                  launcher_peak_rss_bytes: int, launcher_cpu_s: float = 0.0, records: int = 0,
                  error: str | None = None, host_time: str = "model",
                  host_time_scale: float = 1.0, host_contention: str = DEFAULT_HOST_CONTENTION,
                  borrowed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Combine the coordinator's state with what the ranks wrote; works for partial runs. `borrowed`: the parts
    of the GPU's profile taken from another GPU (`DeviceProfile.borrowed()`), part -> that GPU.
    `representatives`: the ranks that ran, each standing for as many (protocol/symmetry.py); default every
    rank. Totals (FLOPs, kernels, NCCL calls, kernel time) count every rank."""
    ran = list(representatives if representatives is not None else range(world_size))
    copies = world_size // len(ran)
    results, problems = load_rank_results(out_dir, ran)
    breakdowns = [rank_breakdown(coordinator, r, host_end_ns=_int(results.get(r, {}).get("host_ns")))
                  for r in ran]
    sim_ns = max((b.end_ns for b in breakdowns), default=0)
    asleep_ns = length(asleep_intervals(coordinator, {b.rank: b.end_ns for b in breakdowns}, sim_ns))
    awake_ns = sim_ns - asleep_ns
    rows = [_rank_row(b, awake_ns, results.get(b.rank)) for b in breakdowns]
    reported = list(results.values())
    flops = copies * sum(b.flops for b in breakdowns)
    sim_s = sim_ns / NS_PER_S
    awake_s = awake_ns / NS_PER_S
    peak_bf16 = gpu.peak_flops.get("bf16", 0.0)
    by_class: Counter = Counter()
    for b in breakdowns:
        by_class.update(b.kernel_ns_by_class)
    rss = [p.peak_rss_bytes for p in processes] + [_int(r.get("simulator_peak_rss_bytes")) for r in reported]
    summary: dict[str, Any] = {
        "gpu": gpu.key, "gpu_name": gpu.name,
        "borrowed": dict(sorted((borrowed or {}).items())),
        "variant": _variant(gpu),
        "cluster": {"nodes": cluster.nodes, "gpus_per_node": cluster.gpus_per_node},
        "world_size": world_size, "representative_ranks": len(ran), "exit_code": exit_code, "complete": complete,
        # ranks that wrote their result themselves (the launcher writes a killed rank's known peaks: launch.py)
        "ranks_reported": sum("written_by" not in r for r in results.values()),
        "simulated_time_s": sim_s,
        "asleep_s": asleep_ns / NS_PER_S,
        "gpu_busy_fraction": _mean(rows, "busy_fraction"),
        "compute_s": _mean(rows, "compute_s"),
        "nccl_s": _mean(rows, "nccl_s"),
        "exposed_comm_s": _mean(rows, "exposed_comm_s"),
        "nccl_wait_s": _mean(rows, "nccl_wait_s"),
        "host_blocked_s": _mean(rows, "host_blocked_s"),
        "flops": flops,
        "achieved_tflops": flops / world_size / awake_s / 1e12 if awake_s else 0.0,
        "mfu_vs_bf16_peak": flops / (awake_s * world_size * peak_bf16) if awake_s and peak_bf16 else None,
        "peak_allocated_gib": max((r["peak_allocated_gib"] for r in rows), default=0.0),
        "peak_reserved_gib": max((r["peak_reserved_gib"] for r in rows), default=0.0),
        "ooms": sum(r["ooms"] for r in rows),
        "kernels": copies * sum(b.kernels for b in breakdowns),
        "nccl_calls": copies * sum(b.nccl_calls for b in breakdowns),
        "host_only_ops": sum(_int(r.get("host_only_ops")) for r in reported),
        "subclass_ops": sum(_int(r.get("subclass_ops")) for r in reported),
        "ops_in_library_python": sum(_int(r.get("ops_in_library_python")) for r in reported),
        "ops_without_elements": sum(_int(r.get("ops_without_elements")) for r in reported),
        "gemm_problems": max((_int(r.get("gemm_problems")) for r in reported), default=0),
        "gemm_kernel_loads": max((_int(r.get("gemm_kernel_loads")) for r in reported), default=0),
        "kernel_time_s_by_class": {k: copies * v / NS_PER_S for k, v in by_class.most_common()},
        "kernel_sources": _counter(reported, "kernel_sources"),
        "kernel_time_share_by_source": _shares(_counter(reported, "kernel_ns_by_source")),
        "generic_ops": _counter(reported, "generic_ops"),
        "placeholder_reads": _counter(reported, "placeholders"),
        "compile": _compile(reported),
        "warnings": sorted({str(w) for r in reported for w in (r.get("warnings") or [])} | set(problems)),
        "simulator_wall_s": round(wall_s, 3),
        "simulator_cpu_s": round(launcher_cpu_s + sum(p.cpu_s for p in processes), 3),
        "simulator_peak_rss_gib": max(rss + [launcher_peak_rss_bytes]) / GiB,
        "launcher_peak_rss_gib": launcher_peak_rss_bytes / GiB,
        "simulator_records": records,
        "host_time": _host_time(host_time, host_time_scale, host_contention, reported),
        "host_work_s_by_term": _host_work(reported),
        "power_cap": _power_cap(coordinator, ran),
        "chip_pace": _chip_pace(coordinator),
        "per_rank": rows,
    }
    if error:
        summary["error"] = error
    return summary


def _host_time(mode: str, scale: float, contention: str, reported: list[dict[str, Any]]) -> dict[str, Any]:
    """How host time was simulated (`--host-time`, its scale, `--host-contention`); measured: the mean CPU
    time charged."""
    if mode != "measured":
        return {"mode": mode, "deterministic": True, "scale": scale, "contention": contention}
    charged = [_int(r.get("host_time_measured_ns")) for r in reported]
    return {"mode": mode, "deterministic": False, "scale": scale, "contention": contention,
            "measured_s": sum(charged) / len(charged) / NS_PER_S if charged else 0.0}


SOURCE_NAMES = {"measured": "measured kernels", "analytic": "analytic model", "generic": "generic guess"}
"""How the summary names where kernel times came from (models/compute.py `KernelEstimate.source`)."""


def _chip_pace(coordinator: CoordinatorState) -> dict[str, Any] | None:
    """How much slower than the mean chip the job's GEMMs and attention ran: its expected slowest chip's pace
    (models/chip_variation.py); None for one GPU or chips taken as uniform."""
    factor = coordinator.clock_factor
    if factor == 1.0:
        return None
    return {"gpus": coordinator.world_size, "clocked_slowdown": factor - 1}


def _power_cap(coordinator: CoordinatorState, ranks: Sequence[int]) -> dict[str, Any] | None:
    """The GPUs' power limit and how much it slowed their tensor-core kernels (mean over ranks); None if off."""
    gpus = [p for p in (coordinator.power(r) for r in ranks) if p is not None]
    if not gpus:
        return None
    clocked = sum(p.clocked_ns for p in gpus) / len(gpus)
    slowed = sum(p.slowed_ns for p in gpus) / len(gpus)
    return {"cap_w": gpus[0].cap.cap_w, "clocked_s": clocked / NS_PER_S, "slowed_s": slowed / NS_PER_S,
            "slowdown": slowed / clocked if clocked else 0.0}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def write_reports(summary: dict[str, Any], coordinator: CoordinatorState, out_dir: Path, *, trace: bool) -> None:
    """summary.json, trace.json (unless `trace` is off), report.png, timeline.png and report.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    if trace:
        from phantora.reports.trace import write_chrome_trace
        write_chrome_trace(out_dir / "trace.json", coordinator)
    if summary["simulated_time_s"] > 0:
        from phantora.reports.plots import write_report_png, write_timeline_png
        write_report_png(summary, out_dir)
        write_timeline_png(summary, coordinator, out_dir)
    from phantora.reports.html import write_run_html
    write_run_html(out_dir)


def _table_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    world, cluster = s["world_size"], s["cluster"]
    nodes = f"{cluster['nodes']} node(s) x {cluster['gpus_per_node']} GPUs, " if world > 1 else ""
    rows = [("GPU", f"{s['gpu_name']} ({s['gpu']}), {nodes}{world} rank(s)")]
    rows += _borrowed_rows(s.get("borrowed") or {})
    rows += _variant_rows(s.get("variant"))
    ran = s.get("representative_ranks", world)
    if ran < world:
        rows.append(("representative ranks", f"{ran} of {world} ranks ran; each other rank did what its "
                                             "representative did (--ranks all: every rank)"))
    rows.append(("simulated time", f"{s['simulated_time_s']:.4f} s"))
    if s.get("asleep_s"):
        rows.append(("program sleep", f"{s['asleep_s']:.4f} s of it every rank slept (time.sleep) or had ended: not "
                                      "GPU idle time; busy, TFLOP/s and MFU are over the rest"))
    if s["simulated_time_s"] > 0:
        per = " (mean over ranks)" if world > 1 else ""
        rows += [("GPU busy", f"{100 * s['gpu_busy_fraction']:.1f} %{per}")]
        if s["nccl_calls"]:
            rows.append(("communication", f"NCCL {1e3 * s['nccl_s']:.2f} ms, "
                                          f"exposed {1e3 * s['exposed_comm_s']:.2f} ms, "
                                          f"waiting for peers {1e3 * s['nccl_wait_s']:.2f} ms{per}"))
        rows += [("host blocked", f"{1e3 * s['host_blocked_s']:.2f} ms{per}"),
                 ("FLOPs / achieved", f"{s['flops']:.3e} / {s['achieved_tflops']:.1f} TFLOP/s per GPU")]
        if s["mfu_vs_bf16_peak"] is not None:
            rows.append(("MFU (bf16 peak)", f"{100 * s['mfu_vs_bf16_peak']:.1f} %"))
    if s["ranks_reported"]:
        rows.append(("peak memory", f"{s['peak_allocated_gib']:.2f} GiB allocated, "
                                    f"{s['peak_reserved_gib']:.2f} GiB reserved (largest rank)"))
    host = s.get("host_time") or {"mode": "model"}
    if host["mode"] == "measured":
        per = " per rank" if world > 1 else ""
        rows.append(("host time", f"measured CPU time x{host['scale']:g}: {1e3 * host['measured_s']:.2f} ms "
                                  f"charged{per} (varies between runs)"))
    else:
        scale = host.get("scale", 1.0)
        hosts = "dedicated hosts" if host.get("contention") == "none" else "hosts contended as the H200 VMs'"
        rows.append(("host time", "host model (deterministic)" + (f", constants x{scale:g}" if scale != 1.0 else "")
                     + f", {hosts}"))
    work = list((s.get("host_work_s_by_term") or {}).items())[:6]
    if work:
        per = " per rank" if world > 1 else ""
        rows.append(("host work", ", ".join(f"{term} {1e3 * t:.1f} ms" for term, t in work) + per))
    power = s.get("power_cap")
    if power is not None and s["simulated_time_s"] > 0:
        per = " per rank" if world > 1 else ""
        rows.append(("power cap", f"{power['cap_w']:g} W: GEMM and attention {100 * power['slowdown']:.1f} % slower, "
                                  f"+{1e3 * power['slowed_s']:.1f} ms{per}"))
    chips = s.get("chip_pace")
    if chips is not None:
        rows.append(("chip pace", f"GEMM and attention at the expected slowest of {chips['gpus']} chips: "
                                  f"{100 * chips['clocked_slowdown']:.1f} % slower than the mean chip"))
    rows.append(("ops intercepted", f"{s['kernels']} kernels, {s['nccl_calls']} NCCL calls, "
                                    f"{s['host_only_ops']} host-only"
                                    + (f" ({s['ops_without_elements']} on tensors without elements)"
                                       if s.get("ops_without_elements") else "")
                                    + (f", {s['subclass_ops']} dispatched by a tensor subclass" if s["subclass_ops"] else "")
                                    + (f", {s['ops_in_library_python']} in library Python's prices"
                                       if s.get("ops_in_library_python") else "")
                                    + (f", {s['gemm_problems']} GEMM problems (largest rank)" if s.get("gemm_problems") else "")
                                    + (f", {s['gemm_kernel_loads']} first launches of cuBLAS kernels"
                                       if s.get("gemm_kernel_loads") else "")))
    top = list(s["kernel_time_s_by_class"].items())[:5]
    if top:
        rows.append(("kernel time", ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in top)))
    sources = s.get("kernel_time_share_by_source") or {}
    if sources:
        rows.append(("kernel sources", ", ".join(f"{SOURCE_NAMES.get(k, k)} {100 * v:.1f} %"
                                                     for k, v in sources.items())
                     + " of GPU time (docs/models/compute.md, Known error)"))
    if s.get("compile"):
        rows.append(("torch.compile", _compile_row(s["compile"])))
    if s["generic_ops"]:
        rows.append(("unmodelled ops", ", ".join(f"{k} x{v}" for k, v in s["generic_ops"].items())))
    if s["ooms"]:
        rows.append(("out of memory", f"{s['ooms']} time(s)"))
    if s["ranks_reported"] < ran:
        rows.append(("rank results", f"{s['ranks_reported']} of {ran} ranks wrote result.json"))
    rows.append(("simulator", f"{s['simulator_wall_s']:.1f} s wall, {s['simulator_cpu_s']:.1f} s CPU, "
                              f"{s['simulator_peak_rss_gib']:.2f} GiB peak RSS (largest process)"))
    rows += [("warning", w) for w in s["warnings"]]
    if "error" in s:
        rows.append(("error", s["error"]))
    return rows


def _variant(gpu: GpuSpec) -> dict[str, Any] | None:
    """A variant GPU (models/gpu.py): its base, what the cluster file gave and what was derived from the base."""
    if gpu.base is None:
        return None
    given = {"memory_gbytes": gpu.memory_gbytes, "memory_type": gpu.memory_type,
             "memory_bandwidth_gbytes_per_s": gpu.memory_bandwidth_bytes_per_s / 1e9,
             "boost_clock_mhz": gpu.boost_clock_mhz, "total_memory_bytes": gpu.total_memory_bytes}
    return {"of": gpu.base.key, "spec": given, "derived": dict(gpu.derived)}


def _variant_rows(variant: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """"variant of h100: 96 GB HBM2e, 2400 GB/s" and one row per derived value."""
    if not variant:
        return []
    spec = variant["spec"]
    memory = f"{spec['memory_gbytes']:g} GB " if spec.get("memory_gbytes") else ""
    rows = [(f"variant of {variant['of']}", f"{memory}{spec['memory_type']}, "
                                            f"{spec['memory_bandwidth_gbytes_per_s']:g} GB/s")]
    return rows + [(f"  derived: {name}", how) for name, how in sorted(variant["derived"].items())]


def _borrowed_rows(borrowed: Mapping[str, str]) -> list[tuple[str, str]]:
    """One row per GPU that lent parts (or fields of parts: "part.field") of the simulated GPU's profile:
    "borrowed from h200: host, NCCL tuning (nvlink_step_latency_ns)"."""
    lenders: dict[str, list[str]] = {}
    for name, lender in borrowed.items():
        part, _, field_name = name.partition(".")
        shown = PART_NAMES.get(part, part) + (f" ({field_name})" if field_name else "")
        lenders.setdefault(lender, []).append(shown)
    return [(f"borrowed from {lender}", ", ".join(parts)) for lender, parts in sorted(lenders.items())]


def _per_rank_lines(s: dict[str, Any]) -> list[str]:
    lines = [f"  {'rank':>4}  {'end s':>9}  {'busy %':>6}  {'NCCL ms':>9}  {'exposed ms':>10}  "
             f"{'blocked ms':>10}  {'peak GiB':>8}"]
    for r in s["per_rank"][:_PER_RANK_ROWS]:
        lines.append(f"  {r['rank']:>4}  {r['end_s']:>9.4f}  {100 * r['busy_fraction']:>6.1f}  "
                     f"{1e3 * r['nccl_s']:>9.2f}  {1e3 * r['exposed_comm_s']:>10.2f}  "
                     f"{1e3 * r['host_blocked_s']:>10.2f}  "
                     + (f"{r['peak_allocated_gib']:>8.2f}" if r["reported"] else f"{'-':>8}"))
    if len(s["per_rank"]) > _PER_RANK_ROWS:
        lines.append(f"  ... {len(s['per_rank']) - _PER_RANK_ROWS} more ranks in summary.json")
    return lines


def print_summary(summary: dict[str, Any], *, file: TextIO) -> None:
    rows = _table_rows(summary)
    width = max(len(k) for k, _ in rows)
    print("\n== Phantora summary " + "=" * 40, file=file)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}", file=file)
    if summary["world_size"] > 1:
        print("  " + "-" * 58, file=file)
        for line in _per_rank_lines(summary):
            print(line, file=file)
    print("=" * 60, file=file)
    file.flush()
