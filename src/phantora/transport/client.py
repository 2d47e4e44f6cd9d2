"""A rank's connection to the launcher's coordinator server.

    client = RankClient.connect("127.0.0.1:41234", rank=3)
    client.send(batch)                 # no reply; returns once the bytes are handed to the kernel
    reply = client.request(batch)      # batch ends in a SyncRequest; blocks until its SyncReply
    client.close()
    client.status = lambda: RankStatus(...)   # optional: sent before a batch whenever it changed

Only a batch ending in a `SyncRequest` waits for an answer, so the hot path is one `sendall` per
batch of hundreds of records. When the simulation stops (a coordinator error, another rank's
crash, Ctrl-C) the server sends a `Failure` and closes: `request` raises `CoordinatorError` with the
server's message; `send` raises it at the next batch (it peeks for a pending message first, which
costs one non-blocking syscall per batch).

Real time only: the rank's `time` module reads simulated time once the runtime's virtual clock is
installed, so this module never calls `time.*` for its own waits and deadlines (it uses
`time.clock_gettime(CLOCK_MONOTONIC)` and `select`, which the virtual clock leaves alone).
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Callable

from phantora.protocol.records import Record, SyncReply, SyncRequest
from phantora.transport.delay import RandomDelay
from phantora.transport.wire import (Failure, Hello, RankStatus, Welcome, WireError, encode, parse_address,
                                    read_message)

TOKEN_ENV_VAR = "PHANTORA_COORDINATOR_TOKEN"
"""The launcher passes the server's per-run token to each rank through this variable."""

_RETRY_INTERVAL_S = 0.05


class CoordinatorError(RuntimeError):
    """The coordinator stopped the simulation; the message says why."""


class CoordinatorConnectionError(ConnectionError):
    """The coordinator cannot be reached, or the connection to it was lost."""


def _real_now_s() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _real_sleep(seconds: float) -> None:
    if seconds > 0:
        select.select([], [], [], seconds)


def _connect_with_retries(host: str, port: int, deadline_s: float) -> socket.socket:
    """Connect, retrying while the server is not up yet, until the real-time deadline."""
    while True:
        remaining = deadline_s - _real_now_s()
        try:
            return socket.create_connection((host, port), timeout=max(remaining, 0.001))
        except OSError as error:
            if remaining <= _RETRY_INTERVAL_S:
                raise CoordinatorConnectionError(
                    f"phantora: cannot reach the coordinator at {host}:{port}: {error}") from None
            _real_sleep(_RETRY_INTERVAL_S)


class RankClient:
    """One rank's connection to the coordinator server. Thread-safe (one batch at a time)."""

    def __init__(self, sock: socket.socket, rank: int, *, delay: RandomDelay | None = None) -> None:
        self.rank = rank
        self._sock = sock
        self._delay = delay
        self._lock = threading.Lock()
        self._closed = False
        self._dead: tuple[type[Exception], str] | None = None
        """Why the connection can no longer be used (the server's Failure, an interrupted request): every
        later call raises it again, rather than a confusing secondary error."""
        self.status: Callable[[], RankStatus] | None = None
        """What the launcher should know of this rank if it dies (wire.RankStatus), read before every batch."""
        self._sent_status = RankStatus()

    @classmethod
    def connect(cls, address: str, rank: int, timeout_s: float = 60.0, *, token: str | None = None) -> "RankClient":
        """Connect to the server at `address` ("host:port") as `rank`, retrying until it is up or
        `timeout_s` of real time have passed. `token` defaults to $PHANTORA_COORDINATOR_TOKEN."""
        host, port = parse_address(address)
        token = os.environ.get(TOKEN_ENV_VAR, "") if token is None else token
        delay = RandomDelay.from_env(f"rank {rank}")
        deadline = _real_now_s() + timeout_s
        sock = _connect_with_retries(host, port, deadline)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(encode(Hello(rank, os.getpid(), token)))
            sock.settimeout(max(deadline - _real_now_s(), 0.001))
            try:
                answer = read_message(sock)
            except TimeoutError:
                raise CoordinatorConnectionError(
                    f"phantora: the coordinator at {address} did not answer rank {rank}'s hello "
                    f"within {timeout_s:g} s") from None
            if isinstance(answer, Failure):
                raise CoordinatorError(f"phantora: the coordinator refused rank {rank}: {answer.message}")
            if not isinstance(answer, Welcome):
                raise CoordinatorConnectionError(
                    f"phantora: the coordinator at {address} answered rank {rank}'s hello with {answer!r}")
            sock.settimeout(None)  # a sync may wait as long as the slowest rank takes in real time
        except BaseException:
            sock.close()
            raise
        return cls(sock, rank, delay=delay)

    def send(self, records: list[Record]) -> None:
        """Send a batch that needs no answer (it must not end in a SyncRequest)."""
        if records and type(records[-1]) is SyncRequest:
            raise ValueError("a batch ending in a SyncRequest needs an answer: use request()")
        with self._lock:
            self._check_open()
            if self._delay:
                self._delay()
            self._raise_if_stopped()
            self._send_frame(self._status_frame() + encode(records))

    def request(self, records: list[Record]) -> SyncReply:
        """Send a batch ending in a SyncRequest and block until the coordinator answers it."""
        if not records or type(records[-1]) is not SyncRequest:
            raise ValueError("request() needs a batch whose last record is a SyncRequest")
        request_id = records[-1].request_id
        with self._lock:
            self._check_open()
            if self._delay:
                self._delay()
            try:
                self._send_frame(self._status_frame() + encode(records))
                answer = self._receive()
            except BaseException as error:
                if not isinstance(error, (CoordinatorError, CoordinatorConnectionError)):
                    # interrupted (KeyboardInterrupt) between request and reply: the coordinator still waits
                    # to answer, so anything sent now would break the protocol; the connection is done
                    self._dead = (CoordinatorConnectionError,
                                  f"phantora: rank {self.rank}'s connection to the coordinator is unusable: "
                                  f"a request was interrupted ({type(error).__name__})")
                raise
            if not isinstance(answer, SyncReply) or answer.request_id != request_id:
                raise CoordinatorConnectionError(
                    f"phantora: rank {self.rank} expected the reply to SyncRequest {request_id}, got {answer!r}")
            return answer

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._sock.close()

    def __enter__(self) -> "RankClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------------
    def _status_frame(self) -> bytes:
        """The rank's status as a frame to put before the batch, when it changed since the last one sent."""
        if self.status is None:
            return b""
        status = self.status()
        if status == self._sent_status:
            return b""
        self._sent_status = status
        return encode(status)

    def _check_open(self) -> None:
        self._raise_if_dead()
        if self._closed:
            raise CoordinatorConnectionError(f"phantora: rank {self.rank}'s connection to the coordinator is closed")

    def _send_frame(self, frame: bytes) -> None:
        try:
            self._sock.sendall(frame)
        except OSError:
            # the server closed the connection; it usually said why just before
            self._raise_if_stopped()
            raise CoordinatorConnectionError(
                f"phantora: rank {self.rank} lost its connection to the coordinator (the launcher is gone)") from None

    def _raise_if_dead(self) -> None:
        if self._dead is not None:
            kind, message = self._dead
            raise kind(message)

    def _raise_if_stopped(self) -> None:
        """Raise if the server has sent something (only a Failure can arrive unasked) or closed."""
        self._raise_if_dead()
        try:
            peek = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            peek = b""
        if peek:
            self._receive()
            raise CoordinatorConnectionError(f"phantora: rank {self.rank} got a message it did not ask for")
        raise CoordinatorConnectionError(
            f"phantora: rank {self.rank} lost its connection to the coordinator (the launcher is gone)")

    def _receive(self) -> object:
        """The next message; raises on a Failure or a closed connection."""
        try:
            answer = read_message(self._sock)
        except (OSError, WireError) as error:
            raise CoordinatorConnectionError(
                f"phantora: rank {self.rank} lost its connection to the coordinator: {error}") from None
        if answer is None:
            raise CoordinatorConnectionError(
                f"phantora: rank {self.rank} lost its connection to the coordinator (the launcher is gone)")
        if isinstance(answer, Failure):
            self._dead = (CoordinatorError,
                          f"phantora: the simulation stopped: {answer.message.removeprefix('phantora: ')}")
            self._raise_if_dead()
        return answer
