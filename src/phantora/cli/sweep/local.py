"""Running a sweep's points on this machine, as many at a time as its cores and memory hold.

Note: [How many points at a time]
A point is a launcher and one process per (representative) rank, each rank ~0.3 GiB before its program builds
anything (docs/launcher.md, Where the memory goes) and busy on a core while it simulates. How many ranks a point
has and how much its program's host memory grows is only known once one has run, so with `--jobs` not given the
sweep runs one point alone first; from then on, from the largest point seen so far (its summary: ranks that ran,
the largest process's peak RSS, the launcher's), it runs as many as fit both
- the cores: a core per rank process, so points do not slow each other down (at least one point), and
- the memory: the points' footprints within `_MEMORY_USE` of the memory available when the sweep started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from phantora.cli.sweep.points import PointRun
from phantora.units import GiB

_MEMORY_USE = 0.8
"""Share of the memory available at the start that the points may take (the rest: page cache, the sweep)."""
_POLL_S = 0.2
_STOP_GRACE_S = 60.0
"""After an interrupt: how long the points' launchers get to stop their ranks and write their reports
(the launcher's own grace for its ranks is 30 s) before SIGKILL."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one point used: its processes and their memory."""

    processes: int
    memory_bytes: int


def point_footprint(folder: Path) -> Footprint | None:
    """From a finished point's summary.json: representative ranks, and the launcher plus every rank at the
    largest process's peak RSS (an upper bound)."""
    try:
        s = json.loads((folder / "summary.json").read_text())
        ranks = int(s["representative_ranks"])
        memory = (s["launcher_peak_rss_gib"] + ranks * s["simulator_peak_rss_gib"]) * GiB
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Footprint(ranks, int(memory))


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (memory that can be had without swapping); total RAM where it is absent."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def concurrency(largest: Footprint | None, *, cores: int, memory_bytes: int) -> int:
    """Note [How many points at a time]: 1 until a point's footprint is known."""
    if largest is None:
        return 1
    by_cores = max(1, cores // max(largest.processes, 1))
    by_memory = max(1, int(memory_bytes * _MEMORY_USE // max(largest.memory_bytes, 1)))
    return min(by_cores, by_memory)


class Interrupted(Exception):
    """The sweep got SIGINT or SIGTERM; the running points were stopped."""


@dataclass
class _Running:
    run: PointRun
    process: subprocess.Popen
    started_s: float


def run_locally(runs: list[PointRun], *, jobs: int | None, on_end: Callable[[PointRun, int, float, int], None],
                known: list[Footprint]) -> None:
    """Run `runs` here, `jobs` at a time (None: Note [How many points at a time]); `on_end(run, exit_code,
    wall_s, running)` after each. `known`: footprints of points done earlier. Raises Interrupted on a signal,
    after stopping the running points."""
    memory = available_memory_bytes()
    largest = max(known, key=lambda f: f.memory_bytes, default=None)
    pending, running = list(runs), []
    stop = _SignalFlag()
    with stop:
        while pending or running:
            if stop.raised:
                _stop(running)
                raise Interrupted()
            limit = jobs if jobs is not None else concurrency(largest, cores=cores(), memory_bytes=memory)
            while pending and len(running) < limit:
                run = pending.pop(0)
                running.append(_Running(run, run.start(), time.monotonic()))
            time.sleep(_POLL_S)
            for r in [r for r in running if r.process.poll() is not None]:
                running.remove(r)
                wall_s = time.monotonic() - r.started_s
                r.run.finish(r.process.returncode, wall_s)
                footprint = point_footprint(r.run.folder)
                if footprint is not None and (largest is None or footprint.memory_bytes > largest.memory_bytes):
                    largest = Footprint(max(footprint.processes, largest.processes if largest else 0),
                                        footprint.memory_bytes)
                on_end(r.run, r.process.returncode, wall_s, len(running))


def _stop(running: list[_Running]) -> None:
    """SIGTERM to every running point's launcher (it stops its ranks and writes its reports), SIGKILL to the
    point's session after the grace period."""
    for r in running:
        _signal(r.process, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for r in running:
        try:
            r.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            _signal(r.process, signal.SIGKILL)
            r.process.wait()


def _signal(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _SignalFlag:
    """While entered, SIGINT and SIGTERM set `raised` instead of ending the sweep at once."""

    def __init__(self) -> None:
        self.raised = False
        self._old: dict[int, object] = {}

    def __enter__(self) -> _SignalFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._set)
        return self

    def _set(self, signum, frame) -> None:
        self.raised = True

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
