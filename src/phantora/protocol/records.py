"""What a rank process tells the coordinator, and what the coordinator answers.

This is the one module both sides import (`runtime` sends, `engine` receives). A rank sends its
records in *program order* (the order its host thread issued them), in batches: a batch is a
`list[Record]`. The coordinator answers only `SyncRequest`s, each with one `SyncReply`.

All times are integer nanoseconds of simulated time (`units.SimTime`). `host_ns` is always the
rank's host clock when it issued the call; it never decreases along a rank's records, and after a
`SyncReply` it is at least the reply's `host_ns`.

Identifiers are the rank's own: `stream_id` names a stream of the rank's device(s): a process that
drives several devices encodes (device, stream) with `encode_stream` (0 is device 0's default stream); `event_id` names a CUDA event object (recording the same event again
replaces what later waits refer to, as `cudaEventRecord` does).

Every record is a slotted dataclass of plain values: small, hashable and picklable, and never changed
once built; all but `KernelRecord` are frozen. A frozen dataclass's `__init__` sets each field through
`object.__setattr__`, five times the cost of plain assignments (1.1 against 0.2 µs for a kernel's eight
fields), and a kernel record is built for nearly every op a rank intercepts and again where the coordinator
decodes it. Validation happens in the coordinator, not here, so building a record on the rank's hot path
costs nothing beyond the object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

CollectiveOp = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
    "all_to_all", "gather", "scatter", "barrier", "send", "recv",
]
COLLECTIVE_OPS: tuple[CollectiveOp, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
    "all_to_all", "gather", "scatter", "barrier", "send", "recv",
)
"""Ops a `CollectiveRecord` may carry: the network model's collectives plus the two halves of a
point-to-point transfer."""
P2P_OPS: tuple[CollectiveOp, ...] = ("send", "recv")
ROOTED_OPS: frozenset[str] = frozenset({"broadcast", "reduce", "gather", "scatter"})

SyncKind = Literal["device", "stream", "event"]

STREAM_BITS = 32
"""A rank's stream id is `device << STREAM_BITS | stream`, so one id names a stream of any device."""


def encode_stream(device: int, stream: int) -> int:
    return device << STREAM_BITS | stream


def decode_stream(stream_id: int) -> tuple[int, int]:
    """(device, stream) of an id made by `encode_stream`."""
    return stream_id >> STREAM_BITS, stream_id & ((1 << STREAM_BITS) - 1)


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see the module's docstring
class KernelRecord:
    """A kernel launched at host time `host_ns` on stream `stream_id`; it runs `duration_ns`."""

    stream_id: int
    host_ns: int
    duration_ns: int
    name: str
    flops: float = 0.0
    bytes: float = 0.0
    """Bytes the kernel reads and writes in device memory (for the trace and roofline)."""
    kernel_class: str = ""
    """The cost model's class (gemm, attention, elementwise, ...), for the trace."""
    detail: str = ""
    """Argument shapes and dtypes, for the trace (empty when no trace is written)."""


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One NCCL call (a collective, or one half of a point-to-point transfer) on `stream_id`.

    NCCL semantics: the call occupies the stream from the moment the stream reaches it until the
    whole operation ends; the operation starts when every member's stream has reached it.

    Matching: the records of one operation carry the same `(tag, group, seq)` on every member.
    - collectives: `group` is the communicator's global ranks in its rank order, `seq` the
      communicator's sequence number (0, 1, ...); every member sends the same `op`,
      `size_bytes` and `root`.
    - point-to-point: `group == (src, dst)` on both sides; the sender's record has `op="send"`,
      the receiver's `op="recv"`; `seq` numbers the transfers from src to dst (per tag).
    `tag` names the communicator (e.g. the c10d process group's name): two communicators over the
    same ranks must use different tags, or their sequence numbers would collide.
    """

    stream_id: int
    host_ns: int
    group: tuple[int, ...]
    """Global ranks, in the communicator's rank order (for send/recv: (src, dst))."""
    seq: int
    op: CollectiveOp
    size_bytes: int
    """nccl-tests' convention per op (models/network/nccl.py: SIZE_CONVENTION); send/recv: the message."""
    root: int | None = None
    """Global rank of the root for broadcast, reduce, gather, scatter; None otherwise."""
    tag: str = ""


@dataclass(frozen=True, slots=True)
class CoalescedRecord:
    """Several NCCL calls issued between `ncclGroupStart`/`ncclGroupEnd` (c10d's coalescing,
    `batch_isend_irecv`): one kernel on `stream_id`, launched at `host_ns` (the group end), which
    ends when every part has ended. Each part is matched on its own; the parts' own `stream_id`
    must equal this record's and their `host_ns` must not exceed it.

    Without coalescing, a rank that sends to and receives from a peer in opposite orders
    deadlocks, in NCCL and here."""

    stream_id: int
    host_ns: int
    parts: tuple[CollectiveRecord, ...]


@dataclass(frozen=True, slots=True)
class EventRecordRecord:
    """`cudaEventRecord(event_id, stream_id)` at host time `host_ns`: the event completes when the
    stream reaches this point (no earlier than the launch itself)."""

    event_id: int
    stream_id: int
    host_ns: int


@dataclass(frozen=True, slots=True)
class StreamWaitRecord:
    """`cudaStreamWaitEvent(stream_id, event_id)`: work launched on `stream_id` afterwards starts
    no earlier than the event's most recent record (in program order) completes. Waiting on an
    event never recorded is a no-op, as in CUDA."""

    stream_id: int
    event_id: int
    host_ns: int


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """The host blocks until the device (every stream), one stream, or one event is done.

    With `query=True` the host does not block (`cudaStreamQuery`, `cudaEventQuery`): the question is
    whether the work is done by `host_ns`, and the reply comes as soon as that is known.
    Either way the rank sends nothing more until it gets the `SyncReply` with the same `request_id`."""

    request_id: int
    host_ns: int
    kind: SyncKind
    stream_id: int | None = None
    """Required for kind "stream"."""
    event_id: int | None = None
    """Required for kind "event"."""
    query: bool = False


NOT_DONE = -1
"""`SyncReply.ready_ns` of a query whose work is not done yet."""


@dataclass(frozen=True, slots=True)
class SyncReply:
    """The answer to a `SyncRequest`: the host resumes at `host_ns` = max(request's host_ns, ready_ns)."""

    request_id: int
    host_ns: int
    ready_ns: int
    """When the awaited work finished (for an event: the event's time, which
    `Event.elapsed_time` needs); 0 when nothing was ever launched or recorded. For a query:
    NOT_DONE if the work is not done by the request's host_ns (whose clock then stays put)."""


@dataclass(frozen=True, slots=True)
class HostTimeRecord:
    """The host clock reached `host_ns` with no GPU work: lets the coordinator rely on this rank
    launching nothing earlier (send it before the host blocks on anything outside the coordinator,
    and periodically while the host computes)."""

    host_ns: int


@dataclass(frozen=True, slots=True)
class HostSleepRecord:
    """The program slept (`time.sleep`) from host time `host_ns` until `until_ns`, launching nothing in
    between: host time that is neither GPU work nor a wait for it, which the summary keeps apart from the
    GPUs' idle time. A rank that keeps sleeping extends one record rather than sending many."""

    host_ns: int
    until_ns: int


@dataclass(frozen=True, slots=True)
class RankFinished:
    """The rank's program ended at host time `host_ns`; it sends nothing more."""

    host_ns: int


Record = Union[KernelRecord, CollectiveRecord, CoalescedRecord, EventRecordRecord, StreamWaitRecord,
               SyncRequest, HostTimeRecord, HostSleepRecord, RankFinished]
"""Anything a rank sends; a batch is a `list[Record]` in program order."""
