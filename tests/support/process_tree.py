"""A process's descendants as /proc shows them, for tests that count what a simulation leaves behind."""

from __future__ import annotations

from phantora.cli.processes import process_table


def descendants(pid: int) -> set[int]:
    """Live descendants of `pid`, and the members of their process groups."""
    table = process_table()
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        children = [p.pid for p in table.values() if p.ppid == parent and not p.zombie]
        found.update(children)
        todo.extend(children)
    return found | {p.pid for p in table.values() if p.pgid in found and not p.zombie}


def alive(pids: set[int]) -> set[int]:
    table = process_table()
    return {pid for pid in pids if pid in table and not table[pid].zombie}
