"""Virtual clock: reads the simulated host clock, sleep advances it."""

import time

from phantora.runtime.clock import REAL_PERF_COUNTER, REAL_TIME_NS, VirtualClock


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
    assert abs(clock.time() - (REAL_TIME_NS() / 1e9 + 1.75)) < 60


def test_install_patches_time_module():
    host = FakeHost()
    saved = (time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic,
             time.monotonic_ns, time.sleep)
    try:
        VirtualClock(host.now, host.advance).install()
        host.ns = 42_000
        assert time.perf_counter_ns() == 42_000
        time.sleep(1.0)
        assert time.monotonic() == 1.000042
    finally:
        (time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic,
         time.monotonic_ns, time.sleep) = saved


def test_file_locks_keep_the_real_clock():
    """filelock polls for other processes' lock files: its sleeps and timeouts must not be simulated time."""
    import filelock._api

    host = FakeHost()
    saved = (time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic,
             time.monotonic_ns, time.sleep, filelock._api.time)
    try:
        VirtualClock(host.now, host.advance).install()
        filelock._api.time.sleep(0.001)
        assert host.ns == 0
        assert abs(filelock._api.time.perf_counter() - REAL_PERF_COUNTER()) < 1.0
    finally:
        (time.time, time.time_ns, time.perf_counter, time.perf_counter_ns, time.monotonic,
         time.monotonic_ns, time.sleep, filelock._api.time) = saved


def test_negative_sleep_rejected():
    host = FakeHost()
    try:
        VirtualClock(host.now, host.advance).sleep(-1)
    except ValueError:
        return
    raise AssertionError("negative sleep accepted")
