"""`report.html`: one self-contained page per run (and one comparing a sweep's points), from the files a run
writes, so `phantora report OUT_DIR` rebuilds it at any time. Charts are SVG drawn here (reports/svg.py); the
page loads nothing from anywhere.

A run's page: the step time (reports/steps.py) and where each rank's time went in a steady step, a timeline of
that step for every rank that ran, memory over time (the allocator's reserved and allocated bytes, each rank's
memory.json), the kernels and collectives that took the most time, and the program's own output (output.log,
which a sweep's point keeps). Sources: summary.json, rank<N>/steps.jsonl, rank<N>/memory.json, trace.json
(without it, from `--no-trace`, the timeline and the top kernels are left out and the breakdown is the whole
run's, from the summary).

Note: [Where a rank's time went]
Over a window (the steady step, or the whole run) a rank's time splits into
- compute: its kernels run and no collective runs beside them;
- overlapped communication: collectives that kernels run beside;
- exposed communication: collectives with no kernel beside them (spin-waiting for late peers included), what
  overlapping them would save;
- host-bound: the GPU has nothing to run while the program's host code is on its way to the next launch;
- idle: the GPU has nothing to run while the program sleeps (`time.sleep`) or has ended.
The intervals come from the trace (the coordinator's placed kernels and collectives, breakdown.py's arithmetic);
the whole-run numbers from the summary, which breakdown.py computed the same way.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from phantora.reports.breakdown import Interval, intersection, length, merge, subtract
from phantora.reports.steps import StepTime, run_step_time
from phantora.reports.svg import Mark, Segment, Series, lanes, lines, scatter
from phantora.units import GiB, NS_PER_S

REPORT_HTML = "report.html"
LOG_FILE = "output.log"
_LOG_LINES = 400
"""The program's last lines shown (the log file has them all)."""
_TOP = 15
"""Kernels and collectives listed."""
_MAX_LANES = 64
_MAX_MEMORY_RANKS = 8
_DRAWN_INTERVALS = 2000
"""A lane joins intervals closer than 1/this of its window: an SVG of a million rectangles draws nothing readable."""
_COLORS = {"compute": "#4c72b0", "overlapped": "#8fbc8f", "exposed": "#dd8452", "host_bound": "#c9c9c9",
           "idle": "#d9c27a", "blocked": "#777777", "reserved": "#dd8452", "allocated": "#4c72b0"}
_PARTS = (("compute", "compute"), ("overlapped", "communication under compute"),
          ("exposed", "exposed communication"), ("host_bound", "host-bound"), ("idle", "idle (asleep or ended)"))
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class ReportError(Exception):
    """The folder holds no run's outputs (one line)."""


@dataclass
class RankIntervals:
    """One rank's intervals from trace.json, in ns."""

    kernels: list[Interval] = field(default_factory=list)
    collectives: list[Interval] = field(default_factory=list)
    blocked: list[Interval] = field(default_factory=list)
    sleeps: list[Interval] = field(default_factory=list)


@dataclass
class TraceData:
    ranks: dict[int, RankIntervals]
    kernel_time: Counter
    kernel_calls: Counter
    collective_time: Counter
    collective_calls: Counter


def read_trace(path: Path) -> TraceData | None:
    """trace.json (reports/trace.py writes one event a line, so it is read a line at a time); None if absent."""
    if not path.is_file():
        return None
    data = TraceData({}, Counter(), Counter(), Counter(), Counter())
    with open(path) as f:
        for line in f:
            event = _event(line)
            if event is None or event.get("ph") != "X":
                continue
            start = round(event["ts"] * 1000)
            interval = (start, start + round(event["dur"] * 1000))
            rank = data.ranks.setdefault(event["pid"], RankIntervals())
            category, name = event.get("cat", ""), event.get("name", "")
            if category == "host_blocked":
                rank.blocked.append(interval)
            elif category == "host_sleep":
                rank.sleeps.append(interval)
            elif category == "nccl":
                rank.collectives.append(interval)
                data.collective_time[name] += interval[1] - interval[0]
                data.collective_calls[name] += 1
            elif category != "nccl_wait":
                rank.kernels.append(interval)
                data.kernel_time[name] += interval[1] - interval[0]
                data.kernel_calls[name] += 1
    return data


def _event(line: str) -> dict[str, Any] | None:
    text = line.strip().rstrip(",")
    if not text.startswith("{") or text.startswith('{"displayTimeUnit"'):
        return None
    try:
        event = json.loads(text)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "ts" in event and "dur" in event and "pid" in event else None


def _clip(intervals: list[Interval], window: Interval) -> list[Interval]:
    return intersection(merge(intervals), [window])


def window_breakdown(rank: RankIntervals, window: Interval) -> dict[str, int]:
    """Note [Where a rank's time went], over `window`; ns."""
    compute = _clip(rank.kernels, window)
    comm = _clip(rank.collectives, window)
    exposed = subtract(comm, intersection(comm, compute))
    busy = merge(compute + comm)
    sleeps = _clip(rank.sleeps, window)
    overlapped = length(comm) - length(exposed)
    idle = length(sleeps) - length(intersection(sleeps, busy))
    return {"compute": length(compute) - overlapped, "overlapped": overlapped, "exposed": length(exposed),
            "host_bound": window[1] - window[0] - length(busy) - idle, "idle": idle}


def whole_run_breakdown(row: dict[str, Any], simulated_s: float) -> dict[str, int]:
    """Note [Where a rank's time went], over the whole run, from a summary's per-rank row; ns."""
    s = NS_PER_S
    overlapped = (row["nccl_s"] - row["exposed_comm_s"]) * s
    busy = (row["compute_s"] + row["exposed_comm_s"]) * s
    idle = (row.get("sleep_s", 0.0) + max(simulated_s - row["end_s"], 0.0)) * s
    return {"compute": round(row["compute_s"] * s - overlapped), "overlapped": round(overlapped),
            "exposed": round(row["exposed_comm_s"] * s), "host_bound": round(max(simulated_s * s - busy - idle, 0)),
            "idle": round(idle)}


# --- the run's page --------------------------------------------------------------------------------
def write_run_html(out_dir: Path) -> Path:
    """Build `<out_dir>/report.html` from the run's files."""
    summary = read_json(out_dir / "summary.json")
    if summary is None:
        raise ReportError(f"{out_dir}: no readable summary.json (not the output folder of a phantora run)")
    ranks = [r["rank"] for r in summary.get("per_rank", [])]
    step, step_rank = run_step_time(out_dir, ranks)
    trace = read_trace(out_dir / "trace.json")
    body = [_header(summary, step, step_rank),
            _breakdown_section(summary, step, trace),
            _timeline_section(summary, step, trace),
            _memory_section(out_dir, ranks),
            _top_section(trace),
            _log_section(out_dir)]
    title = f"Phantora: {summary.get('world_size', 1)} x {summary.get('gpu_name', '?')}"
    path = out_dir / REPORT_HTML
    path.write_text(page(title, "".join(body)))
    return path


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`; None if the file is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _header(s: dict[str, Any], step: StepTime | None, step_rank: int | None) -> str:
    rows = [("GPU", f"{s['gpu_name']} ({s['gpu']}), {s['world_size']} rank(s), {s['cluster']['nodes']} node(s) x "
                    f"{s['cluster']['gpus_per_node']} GPUs")]
    if step is not None:
        rows.append(("step time", f"{1e3 * step.step_s:.2f} ms (median of {step.steps} steady step(s), rank "
                                  f"{step_rank})"))
    else:
        rows.append(("step time", "not measured: the program finished fewer than two optimizer steps"))
    rows.append(("simulated time", f"{s['simulated_time_s']:.4f} s"))
    if s.get("mfu_vs_bf16_peak") is not None:
        rows.append(("MFU (bf16 peak, whole run)", f"{100 * s['mfu_vs_bf16_peak']:.1f} %"))
    rows.append(("peak memory (largest rank)", f"{s['peak_reserved_gib']:.2f} GiB reserved, "
                                               f"{s['peak_allocated_gib']:.2f} GiB allocated"))
    if s.get("ooms"):
        rows.append(("out of memory", f"{s['ooms']} time(s)"))
    rows.append(("outcome", "completed" if s.get("complete") else f"did not complete (exit code {s['exit_code']})"))
    if s.get("error"):
        rows.append(("error", s["error"]))
    rows += [("warning", w) for w in s.get("warnings", [])]
    table = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<section><h2>Summary</h2><table class="kv">{table}</table></section>'


def _breakdown_section(s: dict[str, Any], step: StepTime | None, trace: TraceData | None) -> str:
    rows = s.get("per_rank", [])[:_MAX_LANES]
    if step is not None and trace is not None:
        window, what = step.window_ns, "a steady step"
        parts = {r["rank"]: window_breakdown(trace.ranks.get(r["rank"], RankIntervals()), window) for r in rows}
        total = (window[1] - window[0]) / 1e6
    else:
        what = "the whole run"
        parts = {r["rank"]: whole_run_breakdown(r, s["simulated_time_s"]) for r in rows}
        total = 1e3 * s["simulated_time_s"]
    bars = []
    for rank, split in parts.items():
        segments, at = [], 0.0
        for key, name in _PARTS:
            ms = split[key] / 1e6
            segments.append(Segment(at, at + ms, _COLORS[key], f"rank {rank}: {name} {ms:.3f} ms"))
            at += ms
        bars.append((f"rank {rank}", segments))
    svg = lanes(bars, low=0.0, high=max(total, 1e-9), axis_label="simulated time (ms)",
                legend=[(name, _COLORS[key]) for key, name in _PARTS], label=f"where the time went in {what}")
    cells = "".join(f"<th>{escape(name)} (ms)</th>" for _, name in _PARTS)
    body = "".join(f"<tr><td>{rank}</td>" + "".join(f"<td>{split[key] / 1e6:.3f}</td>" for key, _ in _PARTS)
                   + "</tr>" for rank, split in parts.items())
    return (f"<section><h2>Where the time went: {what}</h2><p>Per rank, as defined in reports/html.py (Note [Where a "
            f"rank's time went]).</p>{svg}<table><tr><th>rank</th>{cells}</tr>{body}</table></section>")


def _timeline_section(s: dict[str, Any], step: StepTime | None, trace: TraceData | None) -> str:
    if trace is None:
        return "<section><h2>Timeline</h2><p>No trace.json (the run had --no-trace).</p></section>"
    window = step.window_ns if step is not None else (0, max(round(s["simulated_time_s"] * NS_PER_S), 1))
    gap = (window[1] - window[0]) // _DRAWN_INTERVALS
    rows = []
    for rank in sorted(trace.ranks)[:_MAX_LANES]:
        r = trace.ranks[rank]
        compute = merge(_clip(r.kernels, window), gap_ns=gap)
        comm = merge(_clip(r.collectives, window), gap_ns=gap)
        exposed = subtract(comm, intersection(comm, merge(_clip(r.kernels, window))))
        segments = [_segment(i, window, "compute", "kernels", 0.0, 0.48) for i in compute]
        segments += [_segment(i, window, "overlapped", "collectives", 0.52, 0.4) for i in comm]
        segments += [_segment(i, window, "exposed", "exposed communication", 0.52, 0.4)
                     for i in merge(exposed, gap_ns=gap)]
        segments += [_segment(i, window, "blocked", "host blocked in a synchronization", 0.94, 0.06)
                     for i in merge(_clip(r.blocked, window), gap_ns=gap)]
        rows.append((f"rank {rank}", segments))
    what = "a steady step" if step is not None else "the whole run (no steady step was measured)"
    legend = [("kernels", _COLORS["compute"]), ("collectives under compute", _COLORS["overlapped"]),
              ("exposed communication", _COLORS["exposed"]), ("host blocked", _COLORS["blocked"])]
    svg = lanes(rows, low=0.0, high=(window[1] - window[0]) / 1e6, axis_label="ms from the step's start",
                legend=legend, label=f"timeline of {what}", lane_height=26.0)
    more = f" (first {_MAX_LANES} of {len(trace.ranks)} ranks)" if len(trace.ranks) > _MAX_LANES else ""
    return (f"<section><h2>Timeline of {what}{more}</h2><p>Simulated time {window[0] / 1e6:.3f} to "
            f"{window[1] / 1e6:.3f} ms; every rank that ran a process.</p>{svg}</section>")


def _segment(interval: Interval, window: Interval, kind: str, name: str, y: float, height: float) -> Segment:
    start, end = (interval[0] - window[0]) / 1e6, (interval[1] - window[0]) / 1e6
    return Segment(start, end, _COLORS[kind], f"{name} {start:.3f}-{end:.3f} ms", y, height)


def _memory_section(out_dir: Path, ranks: list[int]) -> str:
    charts = []
    for rank in ranks[:_MAX_MEMORY_RANKS]:
        memory = read_json(out_dir / f"rank{rank}" / "memory.json")
        if not memory or not memory.get("time_s"):
            continue
        times = memory["time_s"]
        series = [Series("reserved", _COLORS["reserved"], times, [b / GiB for b in memory["reserved_bytes"]]),
                  Series("allocated", _COLORS["allocated"], times, [b / GiB for b in memory["allocated_bytes"]])]
        charts.append(f"<h3>rank {rank}</h3>" + lines(series, x_label="simulated host time (s)",
                                                      y_label="GiB", label=f"memory of rank {rank}"))
    if not charts:
        return "<section><h2>GPU memory over time</h2><p>No rank wrote memory samples.</p></section>"
    more = f" (the first {_MAX_MEMORY_RANKS} ranks)" if len(ranks) > _MAX_MEMORY_RANKS else ""
    return (f"<section><h2>GPU memory over time{more}</h2><p>Device 0 of each rank: what the caching allocator "
            f"holds from the GPU (reserved) and what tensors use of it (allocated).</p>{''.join(charts)}</section>")


def _top_section(trace: TraceData | None) -> str:
    if trace is None:
        return ""
    tables = [_top_table("Kernels", trace.kernel_time, trace.kernel_calls),
              _top_table("Collectives", trace.collective_time, trace.collective_calls)]
    return ("<section><h2>Top kernels and collectives</h2><p>Simulated GPU time over the whole run, summed over the "
            f"ranks that ran a process.</p>{''.join(tables)}</section>")


def _top_table(what: str, time_ns: Counter, calls: Counter) -> str:
    total = sum(time_ns.values())
    if not total:
        return f"<h3>{what}</h3><p>None.</p>"
    rows = "".join(f"<tr><td class='name'>{escape(name)}</td><td>{calls[name]}</td><td>{ns / 1e6:.3f}</td>"
                   f"<td>{100 * ns / total:.1f} %</td></tr>" for name, ns in time_ns.most_common(_TOP))
    return (f"<h3>{what}</h3><table><tr><th>name</th><th>calls</th><th>time (ms)</th><th>share</th></tr>"
            f"{rows}</table>")


def _log_section(out_dir: Path) -> str:
    try:
        text = (out_dir / LOG_FILE).read_text(errors="replace")
    except OSError:
        return ("<section><h2>The program's output</h2><p>Not kept: a run's output goes to the terminal; a sweep's "
                f"points keep theirs in {LOG_FILE}.</p></section>")
    all_lines = _ANSI.sub("", text).splitlines()
    shown = all_lines[-_LOG_LINES:]
    note = f" (the last {len(shown)} of {len(all_lines)} lines)" if len(all_lines) > len(shown) else ""
    return (f"<section><h2>The program's output{note}</h2><pre>{escape(chr(10).join(shown))}</pre></section>")


# --- the page --------------------------------------------------------------------------------------
_CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:960px}
h1{font-size:20px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd} h3{font-size:14px}
table{border-collapse:collapse;font-size:12px;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f5f5f5} table.kv th,table.kv td,td.name{text-align:left} td.name{font-family:monospace;max-width:560px;
overflow-wrap:anywhere} pre{background:#f7f7f7;padding:8px;font-size:11px;overflow:auto;max-height:480px}
tr.best td{background:#fde9d9;font-weight:bold} th.sortable{cursor:pointer}
"""


def page(title: str, body: str, script: str = "") -> str:
    """A whole HTML document: the body, the style and an optional script, inline."""
    tail = f"<script>{script}</script>" if script else ""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>{body}{tail}</body></html>\n")


# --- a sweep's page --------------------------------------------------------------------------------
_SORT_SCRIPT = """
document.querySelectorAll('th.sortable').forEach(function (header) {
  header.addEventListener('click', function () {
    var table = header.closest('table'), index = Array.prototype.indexOf.call(header.parentNode.children, header);
    var rows = Array.prototype.slice.call(table.querySelectorAll('tr')).slice(1);
    var ascending = header.dataset.order !== 'asc';
    header.dataset.order = ascending ? 'asc' : 'desc';
    rows.sort(function (a, b) {
      var x = a.children[index].dataset.value, y = b.children[index].dataset.value;
      var nx = parseFloat(x), ny = parseFloat(y);
      var order = (isNaN(nx) || isNaN(ny)) ? String(x).localeCompare(String(y)) : nx - ny;
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { table.appendChild(row); });
  });
});
"""
_SWEEP_COLUMNS = (("status", "status"), ("step_time_s", "step time (s)"), ("throughput", "throughput"),
                  ("mfu", "MFU"), ("peak_reserved_gib", "peak reserved (GiB)"),
                  ("peak_allocated_gib", "peak allocated (GiB)"), ("wall_s", "simulator wall (s)"))


def write_sweep_html(table: dict[str, Any], out_dir: Path, points_dir: str) -> Path:
    """`<out_dir>/report.html`: the sweep's answer, its plot and its table (sortable), each point linked to its
    own report (`<points_dir>/<folder>/report.html`)."""
    from phantora.reports.sweep import point_label
    rows, axes = table["points"], table["axes"]
    unit, cap = table["throughput_unit"], table["max_memory_gib"]
    best = next((r for r in rows if r["folder"] == table["best"]), None)
    fits = f" within {cap:g} GiB" if cap is not None else ""
    answer = (f"Fastest{fits}: <b>{escape(point_label(best, axes))}</b>, {best['throughput']:.6g} {unit}, "
              f"{best['peak_reserved_gib']:.2f} GiB reserved" if best else f"No point completed{fits}.")
    counts = Counter(r["status"] for r in rows)
    marks = []
    for r in rows:
        if r["peak_reserved_gib"] is None:
            continue
        title = f"{point_label(r, axes)}: {r['status']}, {r['peak_reserved_gib']:.2f} GiB"
        if r["status"] == "oom":
            marks.append(Mark(r["peak_reserved_gib"], 0.0, "cross", "#c44e52", title))
        elif r["status"] == "ok" and r["throughput"] is not None:
            shape = "ring" if r is best else "dot"
            marks.append(Mark(r["peak_reserved_gib"], r["throughput"], shape, "#dd8452" if r is best else "#4c72b0",
                              f"{title}, {r['throughput']:.6g} {unit}"))
    plot = scatter(marks, x_label="peak reserved GPU memory, largest rank (GiB)", y_label=f"throughput ({unit})",
                   label="throughput against peak memory",
                   legend=[("fits", "#4c72b0"), ("out of memory", "#c44e52"), ("fastest that fits", "#dd8452")],
                   x_line=(cap, f"cap {cap:g} GiB") if cap is not None else None)
    columns = [(a, a) for a in axes] + [(k, unit if k == "throughput" else name) for k, name in _SWEEP_COLUMNS]
    columns += [(m, m) for m in table.get("metrics", []) if m != "tokens_per_s"]
    header = "".join(f'<th class="sortable">{escape(name)}</th>' for _, name in columns) + "<th>report</th>"
    body = "".join(_sweep_row(r, columns, points_dir, r is best) for r in rows)
    status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    content = (f"<section><h2>Answer</h2><p>{answer}</p><p>{len(rows)} points: {escape(status)}.</p></section>"
               f"<section><h2>Throughput against peak memory</h2>{plot}</section>"
               f"<section><h2>Points</h2><p>Click a column to sort.</p><table><tr>{header}</tr>{body}</table>"
               "</section>")
    path = out_dir / REPORT_HTML
    path.write_text(page("Phantora sweep", content, _SORT_SCRIPT))
    return path


def _sweep_row(row: dict[str, Any], columns: list[tuple[str, str]], points_dir: str, best: bool) -> str:
    cells = []
    for key, _ in columns:
        value = row.get(key)
        if value is None:
            shown = ""
        elif key == "mfu":
            shown = f"{100 * value:.1f} %"
        else:
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        cells.append(f'<td data-value="{escape("" if value is None else str(value))}">{escape(shown)}</td>')
    report = Path(points_dir) / row["folder"] / REPORT_HTML
    link = f'<td><a href="{escape(report.as_posix())}">report</a></td>'
    title = f' title="{escape(row["error"])}"' if row.get("error") else ""
    return f'<tr{" class=best" if best else ""}{title}>{"".join(cells)}{link}</tr>'
