"""The program's step time, from the step marks its ranks wrote (config/steps.py: the simulated host time at the
end of each optimizer step).

A step is the time between the ends of two consecutive steps of the first optimizer the program stepped. The
first step is not one of them (nothing marks its start: it holds the program's start-up), and the second one
still pays first calls (cuBLAS handles, the allocator growing its pool), so the steady steps are those from the
third on where there are at least three; the step time is their median, which one slow step (a checkpoint, an
evaluation) does not move.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from phantora.config.steps import STEPS_FILE
from phantora.units import NS_PER_S

_WARMUP_STEPS = 1
"""Measured steps (between marks) left out as warm-up when more than this many are steady."""


@dataclass(frozen=True, slots=True)
class StepTime:
    """A rank's steady step time and the steady step closest to it (for the report's timeline)."""

    step_s: float
    """Median of the steady steps."""
    steps: int
    """How many steps the median is over."""
    window_ns: tuple[int, int]
    """The steady step whose length is closest to the median (the last such): its start and end."""


def load_step_marks(out_dir: Path, rank: int) -> list[int]:
    """Host times (ns) of the first optimizer's steps on `rank`; [] if the rank wrote none. A line cut short by
    a crash is skipped."""
    path = out_dir / f"rank{rank}" / STEPS_FILE
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    marks = []
    for line in lines:
        try:
            mark = json.loads(line)
        except ValueError:
            continue
        if isinstance(mark, dict) and mark.get("optimizer") == 0 and isinstance(mark.get("host_ns"), int):
            marks.append(mark["host_ns"])
    return marks


def steady_step(marks: list[int]) -> StepTime | None:
    """The step time from a rank's marks; None with fewer than two marks (no whole step was measured)."""
    windows = list(zip(marks, marks[1:]))
    if not windows:
        return None
    if len(windows) > _WARMUP_STEPS + 1:
        windows = windows[_WARMUP_STEPS:]
    lengths = [end - start for start, end in windows]
    median = statistics.median(lengths)
    closest = min(range(len(windows)), key=lambda i: (abs(lengths[i] - median), -i))
    return StepTime(step_s=median / NS_PER_S, steps=len(windows), window_ns=windows[closest])


def run_step_time(out_dir: Path, ranks: list[int]) -> tuple[StepTime | None, int | None]:
    """The run's step time: the first of `ranks` that marked steps (ranks step together: a synchronous job's
    steps take as long on every rank), and that rank."""
    for rank in ranks:
        step = steady_step(load_step_marks(out_dir, rank))
        if step is not None:
            return step, rank
    return None, None
