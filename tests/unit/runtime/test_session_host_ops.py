"""Who pays a tensor op on the host (Session.host_tensor_op): the program's main thread in the rank's own process,
never a thread beside it or a process forked from the rank."""

from __future__ import annotations

import threading
import time

from phantora.config.run import RankConfig
from phantora.runtime import clock
from phantora.runtime.session import Session
from recording_transport import Recording

LARGE = 64 << 20
"""Bytes of a copy that costs milliseconds on the host, with a new output above the mmap threshold."""


def session() -> Session:
    return Session(RankConfig(gpu="h200", trace=False, use_kernel_database=False), Recording(), flush_interval_s=None)


def test_the_main_thread_pays_a_host_tensor_op():
    s = session()
    s.host_tensor_op(2 * LARGE, [LARGE])
    assert s.now_ns() > 0


def test_a_thread_beside_the_program_pays_nothing():
    """A DataLoader's pin-memory thread copies while the training loop runs on."""
    s = session()
    thread = threading.Thread(target=s.host_tensor_op, args=(2 * LARGE, [LARGE]))
    thread.start()
    thread.join()
    assert s.now_ns() == 0


def test_a_process_forked_from_the_rank_never_touches_its_session(monkeypatch):
    """A DataLoader worker forked while the flusher thread held the session's lock: its collate's host op must not
    wait for the lock, which no thread of the worker would ever release (the unit tier forks nothing: the flag
    clock.py sets in a forked child stands for the fork)."""
    s = session()
    held, release = threading.Event(), threading.Event()

    def flusher() -> None:
        with s.lock:
            held.set()
            release.wait(timeout=5)

    thread = threading.Thread(target=flusher)
    thread.start()
    held.wait()
    monkeypatch.setattr(clock, "_forked", True)
    try:
        started = time.monotonic()
        s.host_tensor_op(2 * LARGE, [LARGE])
        waited = time.monotonic() - started
    finally:
        release.set()
        thread.join()
    assert waited < 1, "the forked process waited for the session's lock"
    assert s.link.host_ns == 0  # and charged nothing
