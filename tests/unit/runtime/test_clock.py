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


def finishes_in_real_time(wait, limit_s: float = 5.0) -> None:
    """Run `wait` (which waits a little real time) in the main thread, where a simulated sleep would move the
    clock; it must end, in real time, leaving the simulated clock where it was."""
    started = clock_module.REAL_PERF_COUNTER()
    wait()
    assert clock_module.REAL_PERF_COUNTER() - started < limit_s


def test_queue_and_threading_waits_keep_the_real_clock(installed_clock):
    import queue

    with pytest.raises(queue.Empty):
        finishes_in_real_time(lambda: queue.Queue().get(timeout=0.05))
    finishes_in_real_time(lambda: threading.Event().wait(0.05))
    finishes_in_real_time(lambda: threading.Condition().acquire(timeout=0.05))
    assert installed_clock.ns == 0


def test_multiprocessing_queue_waits_keep_the_real_clock(installed_clock):
    """A DataLoader worker's index queue: `get(timeout=MP_STATUS_CHECK_INTERVAL)` (multiprocessing.queues)."""
    import multiprocessing
    import queue

    q = multiprocessing.get_context("fork").Queue()
    with pytest.raises(queue.Empty):
        finishes_in_real_time(lambda: q.get(timeout=0.05))
    q.close()
    assert installed_clock.ns == 0


def test_asyncio_timers_keep_the_real_clock(installed_clock):
    """On a frozen clock the event loop's timer was never due: asyncio.sleep never returned."""
    import asyncio

    result = {}

    def run_loop():
        result["value"] = asyncio.run(asyncio.sleep(0.05, result="woke"))

    worker = threading.Thread(target=run_loop, daemon=True)
    worker.start()
    worker.join(5.0)
    assert result.get("value") == "woke", "asyncio.sleep never returned"
    assert installed_clock.ns == 0


def test_file_baton_polling_keeps_the_real_clock(installed_clock, tmp_path):
    """torch's extension builds wait for another process's baton file: each poll's sleep once moved a rank's
    simulated clock, to 53,240 s in all."""
    from torch.utils.file_baton import FileBaton

    baton = tmp_path / "lock"
    baton.write_text("")
    threading.Timer(0.2, baton.unlink).start()
    finishes_in_real_time(lambda: FileBaton(str(baton), wait_seconds=0.01).wait())
    assert installed_clock.ns == 0


def test_socket_timeouts_are_real(installed_clock):
    import socket

    a, b = socket.socketpair()
    a.settimeout(0.05)
    with pytest.raises(TimeoutError):
        finishes_in_real_time(lambda: a.recv(1))
    a.close()
    b.close()
    assert installed_clock.ns == 0


@pytest.mark.parametrize("module, real", [
    ("__main__", False), ("train", False), ("lightning.pytorch.callbacks.timer", False), ("tqdm.std", False),
    ("logging", False), ("torch.distributed.fsdp._runtime_utils", False), ("multiprocessing.connection", True),
    ("multiprocessing.queues", True), ("subprocess", True), ("asyncio.base_events", True),
    ("torch.utils.file_baton", True), ("torch.multiprocessing.spawn", True),
    ("torch.distributed.distributed_c10d", True), ("torch.distributed.elastic.timer.local_timer", True),
    ("torch._inductor.compile_worker.subproc_pool", True), ("urllib3.util.retry", True),
    ("huggingface_hub.utils._http", True), ("filelock._unix", True), ("phantora.transport.client", True),
    ("threadingx", False), ("asyncio_helpers", False),
])
def test_which_callers_keep_the_real_clock(module, real):
    """The rule (Note [Code that waits for other processes]): waiting machinery by module, whole packages, never
    a module that only shares a prefix."""
    assert clock_module._wants_real_clock(module) is real
