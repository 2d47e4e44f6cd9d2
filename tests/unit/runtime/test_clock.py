"""Virtual clock: reads the simulated host clock, sleep advances it.

The real clocks are read through the clock module (`clock_module.REAL_...`): a name bound in this test module
would be rebound by `install`, as any module's (the point of the last test)."""

import threading
import time

import pytest

from phantora.runtime import clock as clock_module
from phantora.runtime.clock import VirtualClock


class FakeHost:
    def __init__(self):
        self.ns = 0

    def now(self):
        return self.ns

    def advance(self, ns):
        self.ns += ns


def test_reads_and_sleep():
    host = FakeHost()
    clock = VirtualClock(host.now, host.advance)
    host.ns = 1_500_000_000
    assert clock.monotonic() == 1.5
    assert clock.monotonic_ns() == 1_500_000_000
    clock.sleep(0.25)
    assert host.ns == 1_750_000_000
    # time.time() is a plausible date: the real epoch at start plus simulated time
    assert abs(clock.time() - (clock_module.REAL_TIME_NS() / 1e9 + 1.75)) < 60


@pytest.fixture
def installed_clock():
    """A virtual clock installed into the `time` module (frozen at 0 unless a test advances it), removed after."""
    host = FakeHost()
    clock = VirtualClock(host.now, host.advance)
    clock.install()
    try:
        yield host
    finally:
        clock.uninstall()


def test_install_patches_time_module(installed_clock):
    installed_clock.ns = 42_000
    assert time.perf_counter_ns() == 42_000
    time.sleep(1.0)
    assert time.monotonic() == 1.000042


def test_file_locks_keep_the_real_clock(installed_clock, tmp_path):
    """filelock polls for a lock another process holds: its sleeps and timeout must be real time, whatever
    module of filelock does the polling."""
    import filelock

    path = str(tmp_path / "held.lock")
    holder = filelock.FileLock(path)
    holder.acquire()
    try:
        started = clock_module.REAL_PERF_COUNTER()
        with pytest.raises(filelock.Timeout):
            filelock.FileLock(path).acquire(timeout=0.2, poll_interval=0.05)
        assert clock_module.REAL_PERF_COUNTER() - started >= 0.2
        assert installed_clock.ns == 0
    finally:
        holder.release()


def test_multiprocessing_waits_keep_the_real_clock(installed_clock):
    """A DataLoader worker checks its parent through multiprocessing's timed waits: on a frozen simulated
    clock their deadline never came and the worker outlived its parent."""
    import multiprocessing.connection

    reader, writer = multiprocessing.Pipe(duplex=False)
    done = threading.Event()

    def wait_on_silent_pipe():
        multiprocessing.connection.wait([reader], timeout=0.05)
        done.set()

    threading.Thread(target=wait_on_silent_pipe, daemon=True).start()
    assert done.wait(5.0), "multiprocessing.connection.wait never timed out"
    assert installed_clock.ns == 0
    reader.close()
    writer.close()


def test_negative_sleep_rejected():
    host = FakeHost()
    try:
        VirtualClock(host.now, host.advance).sleep(-1)
    except ValueError:
        return
    raise AssertionError("negative sleep accepted")


def test_clock_bound_by_name_before_the_patch_is_simulated(monkeypatch):
    """tqdm (imported with torch) did `from time import time`: its rates read the real clock."""
    import sys
    import types

    module = types.ModuleType("bound_before_patch")
    module.time, module.perf = time.time, time.perf_counter
    monkeypatch.setitem(sys.modules, "bound_before_patch", module)
    host = FakeHost()
    clock = VirtualClock(host.now, host.advance)
    clock.install()
    try:
        host.ns = 5_000_000_000
        assert module.perf() == 5.0
        assert abs(module.time() - (clock_module.REAL_TIME_NS() / 1e9 + 5.0)) < 60
    finally:
        clock.uninstall()
    assert module.perf is clock_module.REAL_PERF_COUNTER


def test_sleep_in_another_thread_is_real(installed_clock):
    """Lightning's progress bar sleeps 10 ms at a time in its own thread: that must not move the clock of the
    program's main thread (it had moved it by 320 s in 5 steps)."""
    started = clock_module.REAL_PERF_COUNTER()
    sleeper = threading.Thread(target=time.sleep, args=(0.05,))
    sleeper.start()
    sleeper.join()
    assert installed_clock.ns == 0
    assert clock_module.REAL_PERF_COUNTER() - started >= 0.05
