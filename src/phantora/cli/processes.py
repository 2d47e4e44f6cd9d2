"""The processes a simulation started, found and ended when it ends, however it ends.

Note: [No process outlives its simulation]
A rank may start processes of its own: DataLoader workers, compile workers, a tokenizer's pool, a
program's helper that calls `setsid` and so leaves the rank's process group. When a rank ends
(normally, by a crash, by SIGKILL, stopped by the launcher), such a process would be reparented
to init and live on (a DeepSpeed run left 16 DataLoader workers of ~300 MB each). So:
- the launcher makes itself the *child subreaper* of everything below it (Linux
  `PR_SET_CHILD_SUBREAPER`): an orphaned descendant of a rank becomes the launcher's child instead of
  init's, whatever session or process group it moved to;
- when the ranks have ended, `end_leftovers` scans /proc (no cgroups needed) for the simulation's
  processes: members of a rank's process group, the launcher's children it did not start itself
  (orphans it adopted) that started after the simulation began, and every descendant of those. It
  sends them SIGTERM, gives them a moment, SIGKILLs what remains, repeats until none is left (a
  dying process may still fork), and reaps the ones that became the launcher's children.
Without the subreaper (not Linux), a process that left its rank's group is out of reach; the rest
are still found by their group.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_TERM_GRACE_S = 1.0
"""How long leftovers get between SIGTERM and SIGKILL: they are orphans by now, and a DataLoader
worker that sees its parent gone exits within this."""
_GIVE_UP_S = 10.0
"""A process that survives SIGKILL this long is stuck in the kernel (uninterruptible I/O): not ours to wait for."""


def set_child_subreaper(on: bool) -> bool | None:
    """Make this process the subreaper of its descendants (on) or not; returns the previous setting, or
    None where the OS has no such thing."""
    libc = _libc()
    if libc is None:
        return None
    previous = ctypes.c_int(0)
    if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
        return None
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        return None
    return bool(previous.value)


def _libc() -> ctypes.CDLL | None:
    if not os.path.isdir("/proc/self") or os.uname().sysname != "Linux":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    start_ticks: int
    """Start time after boot in clock ticks (/proc/PID/stat field 22)."""
    zombie: bool


def process_table() -> dict[int, ProcessInfo]:
    """Every process this user can see in /proc (a process gone between listing and reading is skipped)."""
    table: dict[int, ProcessInfo] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # the name (field 2) may hold spaces and parentheses
        table[int(entry)] = ProcessInfo(pid=int(entry), ppid=int(fields[1]), pgid=int(fields[2]),
                                        start_ticks=int(fields[19]), zombie=fields[0] in ("Z", "X"))
    return table


def own_start_ticks() -> int:
    """The clock-tick count at which processes started from now on will show as started (or later)."""
    with open("/proc/uptime") as f:
        uptime_s = float(f.read().split()[0])
    return int(uptime_s * os.sysconf("SC_CLK_TCK"))


def leftovers(table: dict[int, ProcessInfo], *, launcher: int, rank_pids: Iterable[int], since_ticks: int
              ) -> set[int]:
    """The simulation's processes still in `table` (Note [No process outlives its simulation]): the ranks'
    process groups, the launcher's children other than the ranks that started at `since_ticks` or later
    (orphans it adopted as their subreaper), and their descendants. Never the launcher itself."""
    ranks = set(rank_pids)
    roots = {p.pid for p in table.values()
             if p.start_ticks >= since_ticks and (p.pgid in ranks or p.ppid == launcher or p.pid in ranks)}
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in found or pid == launcher:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def end_leftovers(rank_pids: Iterable[int], since_ticks: int) -> list[int]:
    """End every process the simulation left (see `leftovers`): SIGTERM, `_TERM_GRACE_S`, SIGKILL, until
    none is left; reap those that are this process's children. Returns the pids that were running when it
    began (zombies aside), for a note to the user. No-op where there is no /proc."""
    if not os.path.isdir("/proc/self"):
        return []
    me, ranks = os.getpid(), list(rank_pids)
    first = _live(me, ranks, since_ticks)
    sig, next_signal_at, give_up_at = signal.SIGTERM, time.monotonic(), time.monotonic() + _GIVE_UP_S
    found = first
    while found and time.monotonic() < give_up_at:
        if time.monotonic() >= next_signal_at:
            for pid in found:
                _kill(pid, sig)
            sig, next_signal_at = signal.SIGKILL, time.monotonic() + _TERM_GRACE_S
        time.sleep(0.02)
        found = _live(me, ranks, since_ticks)
    return sorted(first)


def _live(me: int, ranks: list[int], since_ticks: int) -> set[int]:
    """The simulation's leftover processes still running; those that already ended and are this process's
    children (adopted orphans) are reaped."""
    table = process_table()
    found = leftovers(table, launcher=me, rank_pids=ranks, since_ticks=since_ticks)
    for pid in found:
        if table[pid].zombie and table[pid].ppid == me:
            _reap_one(pid)
    return {pid for pid in found if not table[pid].zombie}


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_one(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
