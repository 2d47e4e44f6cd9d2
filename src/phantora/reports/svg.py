"""Charts as inline SVG text, drawn here in Python, for the HTML reports (reports/html.py): stacked bars, timeline
lanes, lines and a scatter. Each returns one `<svg>` element with its axes, ticks and legend; every mark has a
`<title>`, which browsers show on hover, so the report needs no script to be read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 900
_LEFT = 110
_RIGHT = 20
_FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of a bar or lane: [start, end) in the chart's unit, its colour and hover text."""

    start: float
    end: float
    color: str
    title: str = ""
    y: float = 0.0
    """Top of the piece within its lane, as a fraction of the lane's height."""
    height: float = 1.0
    """Height as a fraction of the lane's."""


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 5 x 10^k steps)."""
    if not math.isfinite(low) or not math.isfinite(high) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks, value = [], first
    while value <= high + step * 1e-6:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _x_axis(x: Callable[[float], float], ticks: list[float], top: float, bottom: float, label: str) -> list[str]:
    parts = [f'<line x1="{_LEFT}" y1="{bottom}" x2="{WIDTH - _RIGHT}" y2="{bottom}" stroke="#333"/>']
    for t in ticks:
        px = x(t)
        parts.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" stroke="#eee"/>')
        parts.append(f'<text x="{px:.1f}" y="{bottom + 14}" text-anchor="middle">{_fmt(t)}</text>')
    parts.append(f'<text x="{(_LEFT + WIDTH - _RIGHT) / 2}" y="{bottom + 30}" text-anchor="middle">{escape(label)}</text>')
    return parts



def _scale(low: float, high: float, start: float, end: float) -> Callable[[float], float]:
    span = (high - low) or 1.0
    return lambda v: start + (v - low) / span * (end - start)


def _legend(items: Sequence[tuple[str, str]], y: float) -> list[str]:
    parts, x = [], float(_LEFT)
    for name, color in items:
        parts.append(f'<rect x="{x:.1f}" y="{y - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14:.1f}" y="{y}">{escape(name)}</text>')
        x += 24 + 6.5 * len(name)
    return parts


def _svg(height: float, parts: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{escape(label)}" {_FONT}>'
            + "".join(parts) + "</svg>")


def lanes(rows: Sequence[tuple[str, Sequence[Segment]]], *, low: float, high: float, axis_label: str,
          legend: Sequence[tuple[str, str]], label: str, lane_height: float = 22.0) -> str:
    """One lane per row (its label on the left), its segments placed on a shared x axis [low, high]: stacked
    bars (segments end to end) and timelines (segments where they happened) alike."""
    top = 24.0
    bottom = top + lane_height * len(rows)
    x = _scale(low, high, _LEFT, WIDTH - _RIGHT)
    parts = _legend(legend, 14)
    parts += _x_axis(x, nice_ticks(low, high), top, bottom, axis_label)
    for i, (name, segments) in enumerate(rows):
        y0 = top + i * lane_height
        parts.append(f'<text x="{_LEFT - 6}" y="{y0 + lane_height * 0.65:.1f}" text-anchor="end">{escape(name)}</text>')
        for s in segments:
            start, end = max(s.start, low), min(s.end, high)
            if end <= start:
                continue
            width = max(x(end) - x(start), 0.5)
            title = f"<title>{escape(s.title)}</title>" if s.title else ""
            parts.append(f'<rect x="{x(start):.2f}" y="{y0 + 2 + s.y * (lane_height - 4):.2f}" width="{width:.2f}" '
                         f'height="{s.height * (lane_height - 4):.2f}" fill="{s.color}">{title}</rect>')
    return _svg(bottom + 40, parts, label)


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    color: str
    xs: Sequence[float]
    ys: Sequence[float]


def lines(series: Sequence[Series], *, x_label: str, y_label: str, label: str, height: float = 260.0) -> str:
    """Line chart of several series on shared axes from 0."""
    xs = [v for s in series for v in s.xs]
    ys = [v for s in series for v in s.ys]
    x_high, y_high = max(xs, default=1.0) or 1.0, max(ys, default=1.0) or 1.0
    top, bottom = 24.0, height - 40
    x = _scale(0.0, x_high, _LEFT, WIDTH - _RIGHT)
    y = _scale(0.0, y_high * 1.05, bottom, top)
    parts = _legend([(s.name, s.color) for s in series], 14)
    parts += _x_axis(x, nice_ticks(0.0, x_high), top, bottom, x_label)
    parts += _y_axis(y, nice_ticks(0.0, y_high * 1.05), y_label, top, bottom)
    for s in series:
        points = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(s.xs, s.ys))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{s.color}" stroke-width="1.5">'
                     f"<title>{escape(s.name)}</title></polyline>")
    return _svg(height, parts, label)


def _y_axis(y: Callable[[float], float], ticks: list[float], label: str, top: float, bottom: float) -> list[str]:
    parts = [f'<line x1="{_LEFT}" y1="{top}" x2="{_LEFT}" y2="{bottom}" stroke="#333"/>']
    for t in ticks:
        py = y(t)
        parts.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{WIDTH - _RIGHT}" y2="{py:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    parts.append(f'<text transform="translate(16,{(top + bottom) / 2:.0f}) rotate(-90)" '
                 f'text-anchor="middle">{escape(label)}</text>')
    return parts


@dataclass(frozen=True, slots=True)
class Mark:
    """A scatter point: `shape` "dot", "cross" or "ring" (a dot ringed: the highlighted one)."""

    x: float
    y: float
    shape: str
    color: str
    title: str


def scatter(marks: Sequence[Mark], *, x_label: str, y_label: str, label: str, legend: Sequence[tuple[str, str]],
            x_line: tuple[float, str] | None = None, height: float = 340.0) -> str:
    """Scatter from 0 on both axes; `x_line`: a dashed vertical line (value, its name)."""
    x_high = max([m.x for m in marks] + ([x_line[0]] if x_line else []), default=1.0) * 1.08 or 1.0
    y_high = max((m.y for m in marks), default=1.0) * 1.12 or 1.0
    top, bottom = 24.0, height - 40
    x = _scale(0.0, x_high, _LEFT, WIDTH - _RIGHT)
    y = _scale(0.0, y_high, bottom, top)
    parts = _legend(legend, 14)
    parts += _x_axis(x, nice_ticks(0.0, x_high), top, bottom, x_label)
    parts += _y_axis(y, nice_ticks(0.0, y_high), y_label, top, bottom)
    if x_line is not None:
        px = x(x_line[0])
        parts.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" stroke="#555" '
                     f'stroke-dasharray="5,4"><title>{escape(x_line[1])}</title></line>')
    for m in marks:
        px, py, title = x(m.x), y(m.y), f"<title>{escape(m.title)}</title>"
        if m.shape == "cross":
            parts.append(f'<path d="M{px - 5:.1f},{py - 5:.1f}L{px + 5:.1f},{py + 5:.1f}M{px - 5:.1f},{py + 5:.1f}'
                         f'L{px + 5:.1f},{py - 5:.1f}" stroke="{m.color}" stroke-width="2.5">{title}</path>')
            continue
        if m.shape == "ring":
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="11" fill="none" stroke="{m.color}" '
                         f'stroke-width="3"/>')
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="5" fill="#4c72b0">{title}</circle>')
            continue
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="5" fill="{m.color}">{title}</circle>')
    return _svg(height, parts, label)
