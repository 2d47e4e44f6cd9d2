"""The rank's end of the coordinator: its host clock, and the GPU work it has not sent yet.

The rank process knows what it launches and when its host launches it; only the coordinator
knows when the work runs (a kernel may wait behind a collective that waits for another rank).
So the rank describes its work as records (protocol/records.py) and asks the coordinator only
where a real program would block or ask: synchronize, `.item()`, a blocking copy, an event
query.

Note: [Batching]
Records are buffered in program order and sent in batches: when a sync needs an answer, when the
buffer is full, and from a background thread every few milliseconds of wall time while records
wait or the host clock has moved (then with a `HostTimeRecord`). The last rule keeps the
simulation live when the rank blocks on something outside the coordinator (the c10d store, a
DataLoader queue) while other ranks wait for its work: the coordinator only needs the records
and a lower bound on the rank's clock, both of which the flush provides. Batch boundaries never
change simulated times (coordinator Note [Determinism]), so wall-clock flushing is harmless.
"""

from __future__ import annotations

import threading
from typing import Protocol

from phantora.protocol.records import (
    NOT_DONE,
    CoalescedRecord,
    CollectiveRecord,
    EventRecordRecord,
    HostSleepRecord,
    HostTimeRecord,
    KernelRecord,
    RankFinished,
    Record,
    StreamWaitRecord,
    SyncKind,
    SyncReply,
    SyncRequest,
)
from phantora.specs.cluster import cluster_from_flags


class Transport(Protocol):
    """How batches reach the coordinator: transport.client.RankClient, over TCP to the launcher's server (a
    rank never hosts a coordinator itself, so it loads none of the launcher's code)."""

    def send(self, records: list[Record]) -> None: ...

    def request(self, records: list[Record]) -> SyncReply: ...

    def close(self) -> None: ...


class EngineLink:
    """Buffers one rank's records, keeps its host clock, and asks the coordinator at sync points.

    Thread-safe: every method takes `lock` (the session's), which is held while a sync waits for
    its reply, so no record can slip out while the rank is blocked (the protocol forbids it)."""

    def __init__(self, transport: Transport, lock: threading.RLock, *, batch_limit: int = 4096,
                 flush_interval_s: float | None = 0.01) -> None:
        self.transport = transport
        self.lock = lock
        self.batch_limit = batch_limit
        self.host_ns = 0
        self._pending: list[Record] = []
        self._sent_host_ns = 0
        self._next_request = 0
        self._next_event = 0
        self._finished = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_interval_s is not None:
            self._flusher = threading.Thread(target=self._flush_periodically, args=(flush_interval_s,),
                                             name="phantora-flush", daemon=True)
            self._flusher.start()

    # -- host clock --------------------------------------------------------------------------
    def advance_host(self, duration_ns: int) -> None:
        assert duration_ns >= 0, duration_ns
        self.host_ns += duration_ns

    def sleep(self, duration_ns: int) -> None:
        """The program sleeps for `duration_ns`: the host clock advances, and the coordinator learns it was a
        sleep (`HostSleepRecord`; a sleep right after a sleep extends it)."""
        assert duration_ns >= 0, duration_ns
        if duration_ns == 0:
            return
        with self.lock:
            start, self.host_ns = self.host_ns, self.host_ns + duration_ns
            last = self._pending[-1] if self._pending else None
            if type(last) is HostSleepRecord and last.until_ns == start:
                self._pending[-1] = HostSleepRecord(last.host_ns, self.host_ns)
            else:
                self._append(HostSleepRecord(start, self.host_ns))

    # -- work ------------------------------------------------------------------------------
    def kernel(self, stream_id: int, duration_ns: int, name: str, *, flops: float = 0.0, bytes_moved: float = 0.0,
               kernel_class: str = "", detail: str = "") -> None:
        with self.lock:  # `_append`, inline: nearly every op a rank intercepts sends a kernel
            pending = self._pending
            pending.append(KernelRecord(stream_id, self.host_ns, duration_ns, name, flops, bytes_moved, kernel_class,
                                        detail))
            if len(pending) >= self.batch_limit:
                self.flush()

    def collective(self, record: CollectiveRecord | CoalescedRecord) -> None:
        """An NCCL call built by the collectives backend (its host_ns must be `host_ns`)."""
        self._append(record)

    def new_event_id(self) -> int:
        with self.lock:
            self._next_event += 1
            return self._next_event

    def record_event(self, event_id: int, stream_id: int) -> None:
        self._append(EventRecordRecord(event_id, stream_id, self.host_ns))

    def wait_event(self, stream_id: int, event_id: int) -> None:
        self._append(StreamWaitRecord(stream_id, event_id, self.host_ns))

    def wait_stream(self, waiting_stream_id: int, stream_id: int) -> None:
        """Work launched on `waiting_stream_id` from now on waits for what `stream_id` has so far."""
        with self.lock:
            event_id = self.new_event_id()
            self.record_event(event_id, stream_id)
            self.wait_event(waiting_stream_id, event_id)

    # -- questions -------------------------------------------------------------------------
    def sync(self, kind: SyncKind, *, stream_id: int | None = None, event_id: int | None = None) -> int:
        """Block the host until the work is done; returns when it finished (0 if there was none)."""
        reply = self._ask(kind, stream_id, event_id, query=False)
        self.host_ns = max(self.host_ns, reply.host_ns)
        return reply.ready_ns

    def query(self, kind: SyncKind, *, stream_id: int | None = None, event_id: int | None = None) -> int | None:
        """When the work finished if it is done by now, else None; the host does not wait."""
        ready_ns = self._ask(kind, stream_id, event_id, query=True).ready_ns
        return None if ready_ns == NOT_DONE else ready_ns

    def _ask(self, kind: SyncKind, stream_id: int | None, event_id: int | None, *, query: bool) -> SyncReply:
        with self.lock:
            self._next_request += 1
            request = SyncRequest(self._next_request, self.host_ns, kind, stream_id, event_id, query)
            batch, self._pending = self._pending, []
            batch.append(request)
            reply = self.transport.request(batch)
            self._sent_host_ns = max(self.host_ns, reply.host_ns)
            return reply

    # -- sending ---------------------------------------------------------------------------
    def _append(self, record: Record) -> None:
        with self.lock:
            self._pending.append(record)
            if len(self._pending) >= self.batch_limit:
                self.flush()

    def flush(self) -> None:
        """Send what is buffered, and the host clock if it moved since the last send."""
        with self.lock:
            if self._finished:
                return
            if self.host_ns > self._sent_host_ns and (not self._pending or self._pending[-1].host_ns < self.host_ns):
                self._pending.append(HostTimeRecord(self.host_ns))
            if self._pending:
                batch, self._pending = self._pending, []
                self.transport.send(batch)
                self._sent_host_ns = self.host_ns

    def finish(self) -> None:
        """The program ended: send the rest and `RankFinished`; nothing may follow."""
        self._stop.set()
        with self.lock:
            if self._finished:
                return
            self._pending.append(RankFinished(self.host_ns))
            batch, self._pending = self._pending, []
            self._finished = True
            self.transport.send(batch)

    def _flush_periodically(self, interval_s: float) -> None:
        # Event.wait times out on the real monotonic clock (C level), not the virtual clock.
        while not self._stop.wait(interval_s):
            if self.lock.acquire(blocking=False):
                try:
                    self.flush()
                except (OSError, RuntimeError):
                    return  # the coordinator is gone or stopped the run; the main thread reports it
                finally:
                    self.lock.release()
