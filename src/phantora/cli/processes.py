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

Note: [When the launcher itself is killed]
SIGKILL (or the OOM killer) gives the launcher no chance to clean up, and its orphans go to init. Two
things end the simulation then:
- every rank asks the kernel for SIGKILL when its parent, the launcher, dies (`PR_SET_PDEATHSIG`,
  `die_with_parent` in runtime/bootstrap.py), so ranks end at once;
- a guardian process (`Guardian`, `python -m phantora.cli.processes`) that the launcher starts first
  holds the read end of a pipe from it. When the launcher ends normally it writes `done` first; an end
  of file without it means the launcher died, and the guardian ends every process whose environment
  carries the job's `PHANTORA_JOB` variable, which every rank gets and every process it starts inherits
  (DataLoader workers, helpers that called `setsid`, orphans of a double fork), until none is left.
The guardian is in its own process group, so Ctrl-C at a terminal does not reach it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

JOB_ENV_VAR = "PHANTORA_JOB"
"""Every rank's environment holds the job's id here; processes it starts inherit it (Note [When the launcher
itself is killed])."""
_DONE = b"done"

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


def leftovers(table: dict[int, ProcessInfo], *, launcher: int, rank_pids: Iterable[int], since_ticks: int,
              spare: Iterable[int] = ()) -> set[int]:
    """The simulation's processes still in `table` (Note [No process outlives its simulation]): the ranks'
    process groups, the launcher's children other than the ranks that started at `since_ticks` or later
    (orphans it adopted as their subreaper), and their descendants. Never the launcher itself, nor the
    launcher's own helpers in `spare`."""
    ranks, spared = set(rank_pids), set(spare)
    roots = {p.pid for p in table.values() if p.pid not in spared
             and p.start_ticks >= since_ticks and (p.pgid in ranks or p.ppid == launcher or p.pid in ranks)}
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


def end_leftovers(rank_pids: Iterable[int], since_ticks: int, spare: Iterable[int] = ()) -> list[int]:
    """End every process the simulation left (see `leftovers`): SIGTERM, `_TERM_GRACE_S`, SIGKILL, until
    none is left; reap those that are this process's children. Returns the pids that were running when it
    began (zombies aside), for a note to the user. No-op where there is no /proc."""
    if not os.path.isdir("/proc/self"):
        return []
    me, ranks, spare = os.getpid(), list(rank_pids), list(spare)
    first = _live(me, ranks, since_ticks, spare)
    sig, next_signal_at, give_up_at = signal.SIGTERM, time.monotonic(), time.monotonic() + _GIVE_UP_S
    found = first
    while found and time.monotonic() < give_up_at:
        if time.monotonic() >= next_signal_at:
            for pid in found:
                _kill(pid, sig)
            sig, next_signal_at = signal.SIGKILL, time.monotonic() + _TERM_GRACE_S
        time.sleep(0.02)
        found = _live(me, ranks, since_ticks, spare)
    return sorted(first)


def _live(me: int, ranks: list[int], since_ticks: int, spare: list[int]) -> set[int]:
    """The simulation's leftover processes still running; those that already ended and are this process's
    children (adopted orphans) are reaped."""
    table = process_table()
    found = leftovers(table, launcher=me, rank_pids=ranks, since_ticks=since_ticks, spare=spare)
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


# --- when the launcher itself dies (Note [When the launcher itself is killed]) ---------------------------
def new_job_id() -> str:
    return f"{os.getpid()}-{secrets.token_hex(8)}"


class Guardian:
    """The process that ends the job's processes if the launcher dies without doing so. `stop()` (or leaving the
    `with` block) tells it the launcher ended normally."""

    def __init__(self, job_id: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != JOB_ENV_VAR}
        self.proc = subprocess.Popen([sys.executable, "-m", "phantora.cli.processes", job_id], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, env=env, process_group=0)

    def __enter__(self) -> "Guardian":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(_DONE)
                self.proc.stdin.close()
            except OSError:
                pass
        self.proc.wait()


def processes_of_job(job_id: str) -> set[int]:
    """Every process whose environment marks it as part of the job (those this user can read)."""
    marker = f"{JOB_ENV_VAR}={job_id}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.add(int(entry))
        except OSError:
            continue
    found.discard(os.getpid())
    return found


def _guard(job_id: str) -> int:
    """The guardian's life: wait for the launcher's word; on an end of file without it, end the job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    said = b""
    while chunk := os.read(0, 64):
        said += chunk
    if said == _DONE:
        return 0
    give_up_at = time.monotonic() + _GIVE_UP_S
    while (left := processes_of_job(job_id)) and time.monotonic() < give_up_at:
        for pid in left:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(_guard(sys.argv[1]))
