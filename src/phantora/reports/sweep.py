"""A sweep's results: one row per point from what its run wrote, the table (`sweep.csv`, `sweep.json`), the
fastest point that fits a memory cap, and the plot (`sweep.png`: throughput against peak memory).

A point's folder holds its run's outputs (summary.json, rank folders), `point.json` (its settings, command and
exit code, written by the sweep) and `output.log` (everything the run printed). Its status:
- "ok": the run completed;
- "oom": a rank ran out of simulated GPU memory (the allocator's OOM count, or the program's traceback says so);
- "error": the run failed otherwise (the summary's error line, or the exit code);
- "pending": not run yet.
Throughput is the program's own tokens/s where the sweep was told how to read it from the log (`--metric
tokens_per_s=REGEX`), else steps per second (1 / step time): comparable across points that train the same
global batch per step.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phantora.reports.html import LOG_FILE, read_json
from phantora.reports.steps import run_step_time

POINT_FILE = "point.json"
TABLE_CSV = "sweep.csv"
TABLE_JSON = "sweep.json"
PLOT_PNG = "sweep.png"
TOKENS_METRIC = "tokens_per_s"
_OOM_TEXT = re.compile(r"OutOfMemoryError|CUDA out of memory")
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
COLUMNS = ("status", "step_time_s", "steps", "throughput", "mfu", "peak_reserved_gib", "peak_allocated_gib",
           "ooms", "simulated_time_s", "exit_code", "wall_s", "error", "folder")


@dataclass(frozen=True, slots=True)
class Metric:
    """`--metric NAME=REGEX`: a number the program prints, read from the last log line the regex matches (its
    first group, else the whole match; thousands separators dropped)."""

    name: str
    pattern: re.Pattern[str]

    @staticmethod
    def parse(spec: str) -> Metric:
        name, sep, pattern = spec.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not pattern:
            raise ValueError(f"--metric {spec!r}: expected NAME=REGEX, e.g. 'tokens_per_s=tps: ([0-9,.]+)'")
        try:
            return Metric(name, re.compile(pattern))
        except re.error as error:
            raise ValueError(f"--metric {name}: bad regular expression: {error}") from None

    def read(self, log: str) -> float | None:
        found = None
        for match in self.pattern.finditer(log):
            found = match
        if found is None:
            return None
        text = found.group(1) if found.groups() else found.group(0)
        number = _NUMBER.search(text or "")
        try:
            return float(number.group(0).replace(",", "")) if number else None
        except ValueError:
            return None


def point_row(folder: Path, settings: dict[str, str], metrics: list[Metric]) -> dict[str, Any]:
    """One point's row: its settings, then `COLUMNS`, then the metrics."""
    row: dict[str, Any] = dict(settings)
    row.update({c: None for c in COLUMNS})
    row.update({m.name: None for m in metrics})
    row["folder"] = folder.name
    record = read_json(folder / POINT_FILE) or {}
    summary = read_json(folder / "summary.json")
    if "exit_code" not in record:
        row["status"] = "pending"
        return row
    row["exit_code"], row["wall_s"] = record["exit_code"], record.get("wall_s")
    try:
        log = (folder / LOG_FILE).read_text(errors="replace")
    except OSError:
        log = ""
    for metric in metrics:
        row[metric.name] = metric.read(log)
    if summary is None:
        row["status"] = "error"
        row["error"] = _last_error_line(log) or f"exit code {record['exit_code']}, no summary.json"
        return row
    ranks = [r["rank"] for r in summary.get("per_rank", []) if isinstance(r, dict) and "rank" in r]
    step, _ = run_step_time(folder, ranks)
    row.update(steps=step.steps if step else 0, step_time_s=step.step_s if step else None,
               mfu=summary.get("mfu_vs_bf16_peak"), peak_reserved_gib=summary.get("peak_reserved_gib"),
               peak_allocated_gib=summary.get("peak_allocated_gib"), ooms=summary.get("ooms", 0),
               simulated_time_s=summary.get("simulated_time_s"))
    tokens = row.get(TOKENS_METRIC)
    if tokens is not None:
        row["throughput"] = tokens
    elif step is not None and step.step_s > 0:
        row["throughput"] = 1.0 / step.step_s
    if summary.get("ooms") or (record["exit_code"] != 0 and _OOM_TEXT.search(log)):
        row["status"] = "oom"
    elif summary.get("complete") and record["exit_code"] == 0:
        row["status"] = "ok"
    else:
        row["status"] = "error"
    if row["status"] != "ok":  # a partial run's MFU is not the configuration's
        row["error"] = summary.get("error") or _last_error_line(log) or f"exit code {record['exit_code']}"
        row["mfu"] = None
    return row


def _last_error_line(log: str) -> str | None:
    """The last line of the log that names an error (a traceback's last line, phantora's error line)."""
    for line in reversed(log.splitlines()):
        stripped = line.strip()
        if "Error" in stripped or "error:" in stripped:
            return stripped[:300]
    return None


def throughput_unit(rows: list[dict[str, Any]]) -> str:
    return "tokens/s" if any(r.get(TOKENS_METRIC) is not None for r in rows) else "steps/s"


def best_row(rows: list[dict[str, Any]], max_memory_gib: float | None) -> dict[str, Any] | None:
    """The point with the highest throughput among those that completed and, given a cap, whose peak reserved
    memory fits it (the allocator's reserve is what must fit the GPU)."""
    fitting = [r for r in rows if r["status"] == "ok" and r["throughput"] is not None
               and (max_memory_gib is None or (r["peak_reserved_gib"] or 0.0) <= max_memory_gib)]
    return max(fitting, key=lambda r: r["throughput"], default=None)


def write_table(rows: list[dict[str, Any]], out_dir: Path, *, axes: list[str], metrics: list[Metric],
                max_memory_gib: float | None) -> dict[str, Any]:
    """sweep.csv (a row per point) and sweep.json (the rows, the axes, the cap, the best point); returns the
    JSON's content."""
    best = best_row(rows, max_memory_gib)
    columns = [*axes, *COLUMNS, *(m.name for m in metrics if m.name not in COLUMNS)]
    with open(out_dir / TABLE_CSV, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    table = {"axes": axes, "metrics": [m.name for m in metrics], "throughput_unit": throughput_unit(rows),
             "max_memory_gib": max_memory_gib, "best": None if best is None else best["folder"], "points": rows}
    (out_dir / TABLE_JSON).write_text(json.dumps(table, indent=1))
    return table


def point_label(row: dict[str, Any], axes: list[str]) -> str:
    return ", ".join(f"{a}={row[a]}" for a in axes) or row["folder"]


_LABELLED_POINTS = 8
"""Up to this many points that fit are labelled on the plot; beyond, the labels would cover each other and the
points are told apart by colour (the first axis) and marker (the second)."""
_MARKERS = "os^Dvp*h"


def write_plot(table: dict[str, Any], out_dir: Path) -> Path | None:
    """sweep.png: throughput against peak reserved memory, coloured by the first axis' value and shaped by the
    second's; OOM points as red crosses at the memory they reached, the cap as a dashed line, the best point that
    fits ringed and named."""
    rows = [r for r in table["points"] if r["peak_reserved_gib"] is not None]
    if not rows:
        return None
    from phantora.reports.plots import pyplot
    plt = pyplot()
    axes = table["axes"]
    fig, ax = plt.subplots(figsize=(10, 6))
    ok = [r for r in rows if r["status"] == "ok" and r["throughput"] is not None]
    colors = _styles(ok, axes[0] if axes else None, [plt.get_cmap("tab10")(i) for i in range(10)])
    markers = _styles(ok, axes[1] if len(axes) > 1 else None, list(_MARKERS))
    for r in ok:
        ax.scatter([r["peak_reserved_gib"]], [r["throughput"]], s=45, color=colors[_value(r, axes, 0)],
                   marker=markers[_value(r, axes, 1)], zorder=3)
        if len(ok) <= _LABELLED_POINTS:
            ax.annotate(point_label(r, axes), (r["peak_reserved_gib"], r["throughput"]), fontsize=7,
                        textcoords="offset points", xytext=(5, 3))
    handles = [plt.Line2D([], [], linestyle="", marker="o", color=c, label=f"{axes[0]}={v}")
               for v, c in colors.items() if v is not None]
    handles += [plt.Line2D([], [], linestyle="", marker=m, color="#555555", label=f"{axes[1]}={v}")
                for v, m in markers.items() if v is not None]
    ooms = [r for r in rows if r["status"] == "oom"]
    if ooms:
        handles.append(ax.scatter([r["peak_reserved_gib"] for r in ooms], [0.0] * len(ooms), marker="x",
                                  color="#c44e52", s=80, zorder=3, clip_on=False, label="out of memory"))
    cap = table["max_memory_gib"]
    if cap is not None:
        handles.append(ax.axvline(cap, color="#555555", linestyle="--", label=f"cap {cap:g} GiB"))
    best = next((r for r in ok if r["folder"] == table["best"]), None)
    if best is not None:
        handles.append(ax.scatter([best["peak_reserved_gib"]], [best["throughput"]], s=320, facecolors="none",
                                  edgecolors="#dd8452", linewidths=2.5, zorder=4, label="fastest that fits"))
        ax.annotate(point_label(best, axes), (best["peak_reserved_gib"], best["throughput"]), fontsize=8,
                    fontweight="bold", textcoords="offset points", xytext=(10, 10))
    top = max((r["throughput"] for r in ok), default=1.0)
    ax.set_xlim(left=0, right=max(r["peak_reserved_gib"] for r in rows) * 1.08)
    ax.set_ylim(bottom=0, top=top * 1.15 if math.isfinite(top) and top > 0 else None)
    ax.set_xlabel("peak reserved GPU memory, largest rank (GiB)")
    ax.set_ylabel(f"throughput ({table['throughput_unit']})")
    ax.set_title("Sweep: throughput against peak memory")
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    path = out_dir / PLOT_PNG
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _value(row: dict[str, Any], axes: list[str], index: int) -> str | None:
    return row[axes[index]] if index < len(axes) else None


def _styles(rows: list[dict[str, Any]], axis: str | None, styles: list) -> dict[str | None, Any]:
    """A style (colour, marker) per value of `axis` among `rows`, in order of first appearance."""
    values = list(dict.fromkeys(r[axis] for r in rows)) if axis else [None]
    return {v: styles[i % len(styles)] for i, v in enumerate(values)}
