"""The coordinator server: every rank's connection, served on one thread that owns the Coordinator.

    server = CoordinatorServer(coordinator, processes)       # listens on 127.0.0.1, a free port
    # ranks on other machines (cli/multinode.py): host="0.0.0.0", advertise_host=NAME, token=a shared-secret MAC
    env["PHANTORA_COORDINATOR_TOKEN"] = server.token          # ranks connect to server.address
    server.start()                                            # serve on a background thread
    ...; server.rank_exited(r)                                # the launcher saw rank r's process end
    server.wait(); server.finished, server.failure, server.coordinator

The loop is: wait for readable sockets (selectors), read what arrived, cut it into frames, hand
each batch to `coordinator.submit(rank, batch)`, and send every reply it returns to its rank. Only
this thread touches the Coordinator (it is not thread-safe); other threads talk to the server
through a control queue and a wake-up socket. Each rank's batches arrive in order on its own TCP
connection, which is all the coordinator needs (its Note [Determinism]): batches of different
ranks may interleave any way the OS schedules them.

It stops when every rank has finished (`finished`), on the first failure (`failure`: a rank whose
connection closed before it sent RankFinished, a rank that exited without ever connecting, or an
error raised by the coordinator), or when asked to (`stop`). On a failure or a stop it tells every
connected rank why (a `Failure` message, which makes their client raise) and closes.
"""

from __future__ import annotations

import queue
import secrets
import select
import selectors
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Literal, Protocol

from phantora.protocol.errors import CollectiveMismatchError, DeadlockError, ProtocolError
from phantora.protocol.records import RankFinished, Record, SyncReply, SyncRequest
from phantora.transport.delay import RandomDelay
from phantora.transport.wire import (PROTOCOL_VERSION, Failure, FrameReader, Hello, RankStatus, Welcome, WireError,
                                    encode)

_RECV_BYTES = 1 << 20
_SEND_TIMEOUT_S = 30.0
"""A rank that does not take a small reply within this long is stuck; the run fails rather than hangs."""
_FAILURE_SEND_TIMEOUT_S = 1.0

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Where a server may listen with a token of its own making (only this machine's ranks can reach it)."""

FailureKind = Literal["disconnect", "deadlock", "coordinator", "protocol", "internal"]


class RecordSink(Protocol):
    """What the server drives: `engine.coordinator.Coordinator` (or anything with its submit/queries)."""

    world_size: int
    representatives: tuple[int, ...]
    """The ranks that send records: every rank, or the representatives (protocol/symmetry.py)."""

    def submit(self, rank: int, records: list[Record]) -> list[tuple[int, SyncReply]]: ...

    @property
    def safe_ns(self) -> int: ...

    @property
    def done(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ServerFailure:
    """Why the simulation stopped early."""

    kind: FailureKind
    """disconnect: a rank's process went away before finishing; deadlock: the coordinator's DeadlockError
    (nothing can progress); coordinator: the coordinator rejected the records (ProtocolError,
    CollectiveMismatchError); protocol: a bad message on the wire; internal: a bug in Phantora (the message
    has the traceback)."""
    message: str
    rank: int | None = None
    """The rank it concerns, when there is one."""
    at_s: float = 0.0
    """Real monotonic time at which the server saw it (orders it against process exits)."""


@dataclass(frozen=True, slots=True)
class ServerProgress:
    """A snapshot for progress lines (read from another thread: values may be a moment old)."""

    records: int
    batches: int
    safe_ns: int
    connected: int
    finished: int


@dataclass(frozen=True, slots=True)
class RankActivity:
    """What the server last heard from a connected rank (for the launcher's hang watchdog)."""

    heard_s: float
    """Real monotonic time of its last batch (or of its Hello)."""
    waiting_since_s: float | None
    """Since when it has been blocked waiting for a reply (a synchronization); None: not blocked."""


class _Conn:
    __slots__ = ("sock", "rank", "pid", "reader", "finished", "closed", "heard_s", "waiting_since_s")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rank: int | None = None
        self.pid = 0
        self.reader = FrameReader()
        self.finished = False
        self.closed = False
        self.heard_s = time.monotonic()
        self.waiting_since_s: float | None = None


class CoordinatorServer:
    """Serves the ranks of one simulation on one thread. See the module docstring."""

    def __init__(self, coordinator: RecordSink, processes: int, *, host: str = "127.0.0.1",
                 token: str | None = None, advertise_host: str | None = None) -> None:
        if processes != len(coordinator.representatives):
            raise ValueError(f"{processes} rank processes differ from the coordinator's "
                             f"{len(coordinator.representatives)}")
        if token is None and host not in _LOOPBACK_HOSTS:
            # a generated token reaches only this machine's ranks (their environment); other machines need the
            # secret their launchers share
            raise ValueError(f"listening on {host!r}, beyond loopback, needs a token derived from a shared secret")
        self._expected = frozenset(coordinator.representatives)
        self.coordinator = coordinator
        """The engine; read it only after `wait()` returned True (this server's thread owns it until then)."""
        self.processes = processes
        self.token = secrets.token_hex(16) if token is None else token
        """Ranks must present this in their Hello (RankClient reads it from $PHANTORA_COORDINATOR_TOKEN)."""
        # a backlog for every rank: they all connect at once (the kernel caps it at somaxconn)
        # "::" is every interface, IPv4 and IPv6 both where the OS allows one socket to serve both
        dual = host == "::" and socket.has_dualstack_ipv6()
        self._listener = socket.create_server((host, 0), backlog=max(128, processes),
                                              family=socket.AF_INET6 if host == "::" else socket.AF_INET,
                                              dualstack_ipv6=dual)
        self._listener.setblocking(False)
        bound_host, port = self._listener.getsockname()[:2]
        self.address = f"{advertise_host or bound_host}:{port}"
        """"host:port" the ranks connect to: `advertise_host` (the name other machines reach this one by, when
        listening on every interface) or the address listened on."""
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, self._on_accept)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._on_wake)
        self._control: queue.SimpleQueue = queue.SimpleQueue()
        self._conns: set[_Conn] = set()
        self._by_rank: dict[int, _Conn] = {}
        self._finished_ranks: set[int] = set()
        self._records = 0
        self._batches = 0
        self._status: dict[int, RankStatus] = {}
        self._connected_at: dict[int, float] = {}
        self._failure: ServerFailure | None = None
        self._finished = False
        self._running = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._delay = RandomDelay.from_env("server")

    # --- public, any thread -----------------------------------------------------------------------
    def start(self) -> None:
        """Serve on a background thread."""
        assert self._thread is None, "start() called twice"
        self._thread = threading.Thread(target=self.serve, name="phantora-coordinator", daemon=True)
        self._thread.start()

    def rank_exited(self, rank: int) -> None:
        """Rank `rank`'s process has ended. If it never connected, that is a failure: its peers would
        otherwise wait for it forever (a connection it made is in the accept queue by now)."""
        self._post(("exited", rank))

    def stop(self, reason: str = "the launcher stopped the simulation") -> None:
        """Stop serving; connected ranks that have not finished are told `reason`."""
        self._post(("stop", reason))

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server has stopped; False if `timeout_s` passed first."""
        return self._stopped.wait(timeout_s)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def finished(self) -> bool:
        """Every rank sent RankFinished and the coordinator placed all their work."""
        return self._finished

    @property
    def failure(self) -> ServerFailure | None:
        return self._failure

    def finished_ranks(self) -> frozenset[int]:
        """Ranks whose RankFinished arrived (read from another thread: may be a moment old)."""
        return frozenset(self._finished_ranks)

    def progress(self) -> ServerProgress:
        return ServerProgress(self._records, self._batches, self.coordinator.safe_ns, len(self._by_rank),
                              len(self._finished_ranks))

    def activity(self) -> dict[int, RankActivity]:
        """Per connected rank, when it was last heard from and whether it waits for a reply (read from another
        thread: may be a moment old)."""
        return {rank: RankActivity(conn.heard_s, conn.waiting_since_s) for rank, conn in list(self._by_rank.items())}

    def connected_at(self) -> dict[int, float]:
        """Per rank that ever connected, when (monotonic s), even if its connection has closed since (read from
        another thread)."""
        return dict(self._connected_at)

    def rank_status(self) -> dict[int, RankStatus]:
        """Per rank, the last `RankStatus` it sent (kept after its connection closed; read from another thread)."""
        return dict(self._status)

    def close(self) -> None:
        """Stop (if serving) and release the sockets; waits for the serving thread."""
        if self._thread is not None:
            self.stop()
            self._thread.join()
        elif not self._stopped.is_set():
            self._shutdown()
        self._wake_w.close()

    # --- the loop ---------------------------------------------------------------------------------
    def serve(self) -> None:
        """Serve in the calling thread until every rank finished, a failure, or `stop`."""
        self._running = True
        try:
            while self._running:
                for key, _ in self._selector.select():
                    key.data(key.fileobj)
                    if not self._running:
                        break
        except Exception:  # a bug here must not leave the ranks hanging: report it and stop
            self._fail("internal", "phantora: internal error in the coordinator server:\n" + traceback.format_exc())
        finally:
            self._shutdown()

    def _on_accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # non-blocking: a socket with a timeout would poll before every recv, stalling this thread
            sock.setblocking(False)
            conn = _Conn(sock)
            self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, lambda _sock, c=conn: self._on_readable(c))

    def _on_readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self._on_data(conn, data)

    def _on_data(self, conn: _Conn, data: bytes) -> None:
        if not data:
            self._on_closed(conn)
            return
        try:
            messages = conn.reader.feed(data)
        except WireError as error:
            if conn.rank is None:  # not one of our ranks (a port scanner, a stray client): ignore it
                self._forget(conn)
            else:
                self._fail("protocol", f"rank {conn.rank} sent a bad frame: {error}", conn.rank)
            return
        for message in messages:
            if conn.rank is None:
                self._on_hello(conn, message)
            else:
                self._on_batch(conn, message)
            if not self._running or conn.closed:
                return

    def _on_hello(self, conn: _Conn, hello: object) -> None:
        if not isinstance(hello, Hello) or hello.token != self.token:
            self._drop(conn, "not a rank of this simulation (bad hello or token)")  # a stray client: ignore it
            return
        if hello.version != PROTOCOL_VERSION:
            self._fail("protocol", f"rank {hello.rank} speaks wire protocol {hello.version}, the launcher "
                       f"{PROTOCOL_VERSION}: mixed Phantora installations", hello.rank)
            return
        if not isinstance(hello.rank, int) or hello.rank not in self._expected:
            self._fail("protocol", f"a rank process says it is rank {hello.rank!r}, not one of the "
                       f"{self.processes} ranks that run")
            return
        if hello.rank in self._by_rank:
            self._fail("protocol", f"rank {hello.rank} connected twice (pids {self._by_rank[hello.rank].pid} "
                       f"and {hello.pid})", hello.rank)
            return
        conn.rank = hello.rank
        conn.pid = hello.pid
        self._connected_at[hello.rank] = conn.heard_s
        self._by_rank[hello.rank] = conn
        self._send(conn, encode(Welcome(self.coordinator.world_size)))

    def _on_batch(self, conn: _Conn, batch: object) -> None:
        rank = conn.rank
        if type(batch) is RankStatus:  # for the launcher's reports, never the coordinator's
            self._status[rank] = batch
            return
        if type(batch) is not list:
            self._fail("protocol", f"rank {rank} sent {type(batch).__name__} where a record batch belongs", rank)
            return
        finishing = bool(batch) and type(batch[-1]) is RankFinished
        conn.heard_s = time.monotonic()
        if batch and type(batch[-1]) is SyncRequest:
            conn.waiting_since_s = conn.heard_s
        if finishing:  # before submit: the finish may be what leaves the others deadlocked
            conn.finished = True
            self._finished_ranks.add(rank)
        if self._delay:
            self._delay()
        try:
            replies = self.coordinator.submit(rank, batch)
        except DeadlockError as error:
            self._fail("deadlock", str(error))
            return
        except (ProtocolError, CollectiveMismatchError) as error:
            self._fail("coordinator", str(error), rank if isinstance(error, ProtocolError) else None)
            return
        self._records += len(batch)
        self._batches += 1
        for to_rank, reply in replies:
            self._by_rank[to_rank].waiting_since_s = None
            self._send(self._by_rank[to_rank], encode(reply))
        if finishing and len(self._finished_ranks) == self.processes:
            self._on_all_finished()

    def _on_all_finished(self) -> None:
        if not self.coordinator.done:  # the coordinator raises DeadlockError first; this is a safety net
            self._fail("internal", "phantora: every rank finished but the coordinator still has unplaced work")
            return
        self._finished = True
        self._running = False

    def _on_closed(self, conn: _Conn) -> None:
        rank = conn.rank
        self._forget(conn)
        if rank is not None and not conn.finished and self._running:
            self._fail("disconnect", f"rank {rank} disconnected before it finished (its process died or "
                       "closed its connection to the coordinator)", rank)

    def _on_wake(self, wake: socket.socket) -> None:
        try:
            wake.recv(4096)
        except BlockingIOError:
            pass
        while True:
            try:
                what, arg = self._control.get_nowait()
            except queue.Empty:
                return
            if what == "stop":
                self._tell_all(arg)
                self._running = False
                return
            self._check_exited(arg)
            if not self._running:
                return

    def _check_exited(self, rank: int) -> None:
        """Take in every pending connection and byte first: the process is gone, so all it sent is here."""
        self._on_accept(self._listener)
        for conn in sorted(self._conns, key=lambda c: c.rank if c.rank is not None else -1):
            if conn.rank is None and not conn.closed:
                self._read_available(conn)
                if not self._running:
                    return
        if rank not in self._by_rank and self._running and rank in self._expected:
            self._fail("disconnect", f"rank {rank} exited without connecting to the coordinator", rank)

    def _read_available(self, conn: _Conn) -> None:
        while not conn.closed and self._running:
            try:
                data = conn.sock.recv(_RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            self._on_data(conn, data)

    # --- stopping ---------------------------------------------------------------------------------
    def _fail(self, kind: FailureKind, message: str, rank: int | None = None) -> None:
        if self._failure is None and not self._finished:
            self._failure = ServerFailure(kind, message, rank, time.monotonic())
            self._tell_all(message)
        self._running = False

    def _tell_all(self, message: str) -> None:
        """Tell every connected, unfinished rank why the simulation stops (best effort: it may be gone)."""
        frame = encode(Failure(message))
        for conn in list(self._by_rank.values()):
            if conn.closed or conn.finished:
                continue
            try:
                _send_all(conn.sock, frame, _FAILURE_SEND_TIMEOUT_S)
            except OSError:
                pass

    def _send(self, conn: _Conn, frame: bytes) -> None:
        try:
            _send_all(conn.sock, frame, _SEND_TIMEOUT_S)
        except OSError as error:
            self._fail("disconnect", f"{self._who(conn)} cannot be reached ({error})", conn.rank)

    def _drop(self, conn: _Conn, why: str) -> None:
        try:
            _send_all(conn.sock, encode(Failure(why)), _FAILURE_SEND_TIMEOUT_S)
        except OSError:
            pass
        self._forget(conn)

    def _forget(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _shutdown(self) -> None:
        self._running = False
        for conn in list(self._conns):
            self._forget(conn)
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        # _wake_w stays open until close(): other threads may still post to a stopped server harmlessly
        self._stopped.set()

    def _post(self, item: tuple[str, object]) -> None:
        self._control.put(item)
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # stopped already: nothing to wake

    @staticmethod
    def _who(conn: _Conn) -> str:
        return f"rank {conn.rank}" if conn.rank is not None else "a connecting process"


def _send_all(sock: socket.socket, frame: bytes, timeout_s: float) -> None:
    """sendall on a non-blocking socket, waiting for room at most `timeout_s` in all (TimeoutError)."""
    view = memoryview(frame)
    deadline = time.monotonic() + timeout_s
    while view:
        try:
            view = view[sock.send(view):]
        except (BlockingIOError, InterruptedError):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([], [sock], [], remaining)[1]:
                raise TimeoutError(f"the peer took no data for {timeout_s:g} s") from None
