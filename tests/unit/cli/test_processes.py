"""Which processes belong to a simulation that ended (Note [No process outlives its simulation])."""

from phantora.cli.processes import ProcessInfo, leftovers

LAUNCHER, OTHER_CHILD = 100, 101
RANKS = (200, 300)


def table(*rows: tuple[int, int, int, int]) -> dict[int, ProcessInfo]:
    """(pid, ppid, pgid, start ticks) rows."""
    return {pid: ProcessInfo(pid, ppid, pgid, start, zombie=False) for pid, ppid, pgid, start in rows}


def test_what_is_left_of_a_simulation():
    processes = table(
        (1, 0, 1, 0),
        (LAUNCHER, 1, LAUNCHER, 10),
        (OTHER_CHILD, LAUNCHER, OTHER_CHILD, 5),  # the launcher's own child from before the simulation
        (201, 1, 200, 60),                       # a DataLoader worker of rank 200, orphaned to init (no subreaper)
        (202, LAUNCHER, 202, 60),                # a setsid'd child of a rank, adopted by the launcher
        (203, 202, 202, 61),                     # ... and its child
        (301, 300, 300, 70),                     # a child of a rank still running
        (400, 1, 400, 70),                       # somebody else's process
    )
    found = leftovers(processes, launcher=LAUNCHER, rank_pids=RANKS, since_ticks=50)
    assert found == {201, 202, 203, 301}
