"""The wire between rank processes and the coordinator server: length-prefixed pickle frames over TCP.

A frame is a 4-byte big-endian payload length followed by the payload, one pickle (protocol 5) of
one message. A rank sends `Hello` first and waits for `Welcome` (or `Failure`); after that it sends
record batches (`list[Record]`, protocol/records.py), each preceded by a `RankStatus` when its status
changed, and receives a `SyncReply` for each batch that ends in a `SyncRequest`, or a `Failure` when
the simulation stops. Nothing else ever crosses.

Note: [Fast pickling of records]
Records are slotted dataclasses. Pickle's default path for them calls the dataclass's
Python-level `__getstate__`/`__setstate__` per record (~0.6 M records/s each way). `_Pickler` reduces
each record class to `(cls, field values)` through a C-level dispatch table instead: encoding is
~4x faster and decoding ~2x (the record's own `__init__` rebuilds it). Any standard unpickler reads
these frames.

Note: [Restricted unpickling]
The server listens on a localhost TCP port that any local process can reach, and unpickling can
run arbitrary code. `decode` therefore resolves only the classes of this protocol; anything else in
a frame is a `WireError`. (A per-run token in `Hello` keeps stray clients out as well.)
"""

from __future__ import annotations

import dataclasses
import io
import operator
import pickle
import socket
import struct
from dataclasses import dataclass
from typing import Any, Callable

from phantora.protocol import records as _records
from phantora.protocol.records import (
    CoalescedRecord,
    CollectiveRecord,
    EventRecordRecord,
    HostSleepRecord,
    HostTimeRecord,
    KernelRecord,
    RankFinished,
    StreamWaitRecord,
    SyncReply,
    SyncRequest,
)

PROTOCOL_VERSION = 3
"""Bumped whenever a message or record changes shape; `Hello` carries it."""

HEADER = struct.Struct("!I")
MAX_FRAME_BYTES = 1 << 30
"""A frame longer than this is treated as corruption, not allocated."""


class WireError(ConnectionError):
    """A frame that is not a message of this protocol (corrupt stream or a foreign client)."""


@dataclass(frozen=True, slots=True)
class Hello:
    """The first message of a rank: who it is."""

    rank: int
    pid: int
    token: str
    """The per-run secret the launcher gave the rank (PHANTORA_COORDINATOR_TOKEN)."""
    version: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class Welcome:
    """The server accepted the rank."""

    world_size: int


@dataclass(frozen=True, slots=True)
class Failure:
    """The simulation stopped; `message` says why (one line, or the coordinator's error text)."""

    message: str


@dataclass(frozen=True, slots=True)
class RankStatus:
    """What the launcher needs to know of a rank when it fails, not part of the simulation: sent before a batch
    whenever it changed, so the server holds it as of the rank's last batch (its process may die without a word).
    Never given to the coordinator, so it changes no simulated number."""

    peaks: tuple[tuple[int, int], ...] = ()
    """Per device of the rank, its peak (allocated, reserved) bytes so far (the result file's `devices`)."""
    work: str = ""
    """The last NCCL call it launched, as ProcessGroupNCCL's watchdog names it (`WorkNCCL(SeqNum=3, OpType=
    ALLREDUCE, NumelIn=65536, NumelOut=65536, Timeout(ms)=600000)`); empty before the first."""
    group_rank: int = 0
    """The rank's rank in that call's group (the watchdog's `[Rank N]`)."""
    timeout_s: float = 0.0
    """That call's process-group timeout (`init_process_group(timeout=...)`, `new_group(timeout=...)`); 0: none."""


RECORD_TYPES: tuple[type, ...] = (KernelRecord, CollectiveRecord, CoalescedRecord, EventRecordRecord,
                                  StreamWaitRecord, SyncRequest, SyncReply, HostTimeRecord, HostSleepRecord,
                                  RankFinished)
MESSAGE_TYPES: tuple[type, ...] = (Hello, Welcome, Failure, RankStatus)


def _field_reducer(cls: type) -> Callable[[Any], tuple]:
    """`obj -> (cls, (field values...))`, the reduction pickle stores (Note [Fast pickling of records])."""
    names = [f.name for f in dataclasses.fields(cls)]
    get = operator.attrgetter(*names)
    if len(names) == 1:  # attrgetter of one name returns the value, not a tuple
        return lambda obj: (cls, (get(obj),))
    return lambda obj: (cls, get(obj))


class _Pickler(pickle.Pickler):
    dispatch_table = {cls: _field_reducer(cls) for cls in RECORD_TYPES + MESSAGE_TYPES}


_ALLOWED: dict[tuple[str, str], type] = {(cls.__module__, cls.__qualname__): cls
                                         for cls in RECORD_TYPES + MESSAGE_TYPES}
assert all(m == _records.__name__ or m == __name__ for m, _ in _ALLOWED)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        cls = _ALLOWED.get((module, name))
        if cls is None:
            raise WireError(f"frame refers to {module}.{name}, which is not part of the Phantora wire protocol")
        return cls


def encode(message: object) -> bytes:
    """One frame (header and payload) carrying `message`."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    _Pickler(buffer, protocol=5).dump(message)
    frame = buffer.getbuffer()
    length = len(frame) - HEADER.size
    if length > MAX_FRAME_BYTES:
        raise WireError(f"message of {length} bytes exceeds the frame limit of {MAX_FRAME_BYTES} bytes")
    HEADER.pack_into(frame, 0, length)
    del frame  # release the export so getvalue can copy
    return buffer.getvalue()


def decode(payload: bytes | memoryview) -> object:
    """The message in one frame's payload (Note [Restricted unpickling])."""
    try:
        return _Unpickler(io.BytesIO(payload)).load()
    except WireError:
        raise
    except Exception as error:  # truncated or garbled pickle: every kind of exception is possible
        raise WireError(f"undecodable frame ({type(error).__name__}: {error})") from None


def _frame_length(header: bytes | memoryview) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise WireError(f"frame header announces {length} bytes, over the limit of {MAX_FRAME_BYTES}")
    return length


class FrameReader:
    """Reassembles frames from the chunks a non-blocking reader gets (the server's side)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[object]:
        """Add received bytes; return every message now complete, in order."""
        buffer = self._buffer
        buffer += data
        messages = []
        offset = 0
        view = memoryview(buffer)
        try:
            while len(buffer) - offset >= HEADER.size:
                length = _frame_length(view[offset:offset + HEADER.size])
                end = offset + HEADER.size + length
                if end > len(buffer):
                    break
                messages.append(decode(view[offset + HEADER.size:end]))
                offset = end
        finally:
            view.release()
        if offset:
            del buffer[:offset]
        return messages

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame still waiting for the rest."""
        return len(self._buffer)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    """`n` bytes from a blocking socket; None if it closes before any byte arrives."""
    data = bytearray(n)
    view = memoryview(data)
    got = 0
    while got < n:
        count = sock.recv_into(view[got:], n - got)
        if count == 0:
            if got == 0:
                return None
            raise WireError(f"connection closed in the middle of a frame ({got} of {n} bytes)")
        got += count
    return bytes(data)


def read_message(sock: socket.socket) -> object | None:
    """The next message from a blocking socket; None when the peer closed the connection cleanly."""
    header = _recv_exactly(sock, HEADER.size)
    if header is None:
        return None
    length = _frame_length(header)
    payload = _recv_exactly(sock, length) if length else b""
    if payload is None:
        raise WireError("connection closed between a frame's header and its payload")
    return decode(payload)


def parse_address(address: str) -> tuple[str, int]:
    """`"host:port"` -> (host, port); ValueError with the reason otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"coordinator address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)
