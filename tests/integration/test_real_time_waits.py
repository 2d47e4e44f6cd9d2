"""The simulated clock never reaches waits for other processes (Note [Code that waits for other processes] in
runtime/clock.py): the cases that start processes (the unit tier may not); the others are in
tests/unit/runtime/test_clock.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from phantora.runtime import clock as clock_module
from phantora.runtime.clock import VirtualClock


@pytest.fixture
def simulated_ns():
    """A virtual clock installed into `time`, frozen unless a sleep advances it; yields the advanced total."""
    advanced = [0]
    clock = VirtualClock(lambda: advanced[0], lambda ns: advanced.__setitem__(0, advanced[0] + ns))
    clock.install()
    try:
        yield advanced
    finally:
        clock.uninstall()


def test_subprocess_timeouts_are_real(simulated_ns):
    started = clock_module.REAL_PERF_COUNTER()
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3)
    assert clock_module.REAL_PERF_COUNTER() - started < 10
    assert simulated_ns[0] == 0


def test_a_forked_child_has_the_real_clock(simulated_ns):
    """A DataLoader worker forked from a rank: its sleeps are real and never move a simulated clock (in the rank
    they would go to the session it shares with its parent)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        began, real_began = time.monotonic(), clock_module.REAL_MONOTONIC()
        time.sleep(0.05)
        real = abs((time.monotonic() - began) - (clock_module.REAL_MONOTONIC() - real_began)) < 0.01
        os.write(write, b"ok" if real and simulated_ns[0] == 0 else b"simulated")
        os._exit(0)
    os.close(write)
    assert os.read(read, 16) == b"ok"
    os.close(read)
    os.waitpid(pid, 0)
    assert simulated_ns[0] == 0
