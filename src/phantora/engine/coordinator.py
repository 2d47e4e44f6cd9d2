"""The coordinator's engine: every rank's GPU streams, the collective rendezvous, the network, and
the answers to the ranks' synchronization requests. Pure: no sockets, no processes, no torch, no
clocks; a transport layer feeds it record batches (protocol/records.py) and delivers its replies.

    coord = Coordinator(world_size=8, network=NetworkSimulator(topology), launch_latency_ns=0)
    for rank, reply in coord.submit(rank, batch):   # every reply that became final, any rank's
        send(rank, reply)
    coord.spans(rank), coord.collectives(), coord.busy_ns(rank), coord.host_waits(rank)

The loop is: receive (`_accept` each record), match and place (`_settle`), reply (`_release`),
advance the network as far as is safe (`_advance`), and again.

Note: [Placing work on streams]
Each stream of a rank is a FIFO queue. An item is placed when everything before it on its stream
is placed (and, for a stream wait, the awaited event record is placed):
- a kernel starts at max(host_ns + launch latency, stream tail) and ends `duration_ns` later;
- an event record completes at max(host_ns + launch latency, stream tail);
- a stream wait raises the stream tail to the event's time (an event never recorded: no-op);
- an NCCL call (a collective, a send or recv, or a coalesced group of them) *reaches* its stream at
  member start = max(host_ns + launch latency, stream tail). Each operation it contains starts on
  the network when the last of its members has reached it (NCCL kernels spin until their peers
  arrive), and the call holds the stream until all its operations have ended; the stream tail
  becomes that end. Everything behind it on the stream waits, unplaced, until then.
All of this is a pure function of the rank's records and of the network's completions: an item's
times, once computed, are final.

Note: [Conservative safe time]
The network must never be advanced past a time before which a collective it has not been given
yet could still start (NetworkSimulator.advance_to is that promise). Ranks are in three states:
*active* (sending records; its clock is the host_ns of its last record), *blocked* (waiting for a
SyncReply; it sends nothing until then) and *finished*. Claim: no collective not yet submitted can
start before

    X = min(host clock of every active rank, the network's next event time).

Take such a collective R with start s, and a member m whose member start is still unknown (there
is one, or R would have been submitted). Either m's record is still to come, or it is queued
behind an unplaced item. (a) m active, record to come: s >= m's member start >= its host_ns >=
m's clock >= X. (b) m blocked, record to come: its host_ns >= the reply's host_ns >= the time of
some awaited, still unplaced item U (a reply is released the moment its items are placed).
(c) queued: s >= the time of the unplaced item U ahead of it. In (b) and (c) follow U: an unplaced
kernel, event record or wait sits behind another unplaced item; an NCCL call is unplaced because
one of its operations is either not submitted (recurse into it) or in the network and not
complete. Following the chain (it is finite unless it loops, and a loop never starts at all), it
ends in case (a) or at an operation in the network that has not completed; if no request starts
before s, the network up to s is exactly the network without new requests, whose next event is
no earlier than X, so that operation ends at >= X. Every step of the chain only lowers the time,
so s >= X.

Hence `_advance` calls `advance_to(X)` repeatedly: when the next network event is below every
active rank's clock it moves one event instant at a time, because a completion at E may unblock
work (a rank's reply, the next collective on a stream) that starts at E, so promising beyond E
would be wrong. Completions it returns are final; items placed from them are final; a reply is
released as soon as its awaited items are placed, so its value can never change.

Progress: while some rank is active, its next batch raises X (the transport must deliver one:
HostTimeRecord or RankFinished, see docs/coordinator.md). With no rank active, X is the next
network event and the network runs instant by instant until some reply becomes final; this is
`run_until_next_completion` done in steps. With no rank active and the network idle, nothing can
ever change: if a rank is still blocked, or a collective still lacks a member when every rank has
finished, that is a deadlock of the program (mismatched collectives, as on a real cluster hang),
reported as `DeadlockError` naming what is missing. Finished ranks impose no bound.

Note: [Compute beside NCCL]
With a `GpuSharing` model (models/interference.py), compute kernels and NCCL operations of one GPU
slow each other down. A kernel's duration then depends on whether an NCCL operation of its rank is
in flight when it starts, which is final only once the network has reached that time: a kernel
whose start S lies beyond the network's time waits, unplaced, and the streams behind it with it.
Such a kernel is a new end of the chain in Note [Conservative safe time] (whatever is behind it
starts at or after S), so S joins the bound: the network advances to min(X, earliest waiting
kernel start), the kernels due are placed (scaled by `compute_slowdown` if an operation with
member start before S has not completed by S; a GEMM or attention kernel also by the held-SM factor
if an NCCL call of its own rank was reached by its stream before S and has not ended, even while
the call still waits for other members), and each placement tells the network that the GPU
computes from S to the kernel's end (`mark_compute`), which slows that GPU's NCCL flows. A reply
becomes final once its kernels are placed, as before; and a rank's clock is never behind the
network's time (replies are released, and the rank counts in the bound, at its kernels' end).
Without a sharing model kernels are placed at once, as in Note [Placing work on streams].

Note: [Power cap]
With a `PowerCap` (models/power.py), each GPU keeps the average power its kernels demand, and a
GEMM or attention kernel that starts while that average exceeds the board's limit runs longer by
the factor that brings it back. The average is updated kernel by kernel in start order, so it needs
the sharing model's placement (kernels placed only once the network has reached their start, in GPU
order); without one the coordinator refuses a power cap. The stretch multiplies the interference
factor: a GEMM beside an all-gather is slowed by both.

Note: [The slowest chip's pace]
Chips of one GPU model run tensor-core work at slightly different speeds, and a job whose GPUs synchronize runs at
its slowest chip's pace (models/chip_variation.py Note [Chip variation]). A `clock_factor` other than 1 multiplies
every GEMM and attention kernel of every GPU, after interference: the expected slowest of the job's chips. Under the
power cap the slower chip spends as much more energy per operation (same power, lower clock), so the cap slows its
kernels as much as the mean chip's and the factor holds at the limit too, as measured. One factor for all GPUs keeps
representative ranks identical to running every rank.

Note: [One kernel at a time]
With a sharing model, the kernels of one GPU also run one at a time, whatever their streams: a
training kernel fills every SM, so a kernel on a side stream (FSDP2's all-gather copy-in) gets the
GPU only between two kernels of the main stream, as real step profiles show (it starts in the tail
of the kernel running when it became ready). NCCL operations (a few SMs) and host-device copies
(copy engines) are exempt. So a kernel starts at max(ready, the GPU's last kernel end + the
kernel gap), ready being max(host_ns + launch latency, stream tail); the gap (`kernel_gap_ns`, 0.89 µs on an
H200) is what back-to-back kernels of a real step lose beyond their estimated durations, which hold
only the minimum gap between kernels (docs/coordinator.md "Kernel gap"); a kernel launched onto an
idle GPU does not pay it. Among kernels that could take the GPU at the same
time, the one ready first wins (the main stream's next kernel becomes ready only when the kernel
before it ends, so a side-stream kernel that was waiting goes first), then the one launched first.
Every kernel therefore waits on the heap, keyed (start, ready, host_ns, rank, stream), and is
placed only when the network has reached its start and it is popped in that order; a kernel that
finds its GPU taken meanwhile goes back with the later start. The order is a function of the
records alone: nothing with a start at or before the network's time can still arrive (Note
[Conservative safe time]).

Note: [Queries]
A query (`cudaStreamQuery`, `cudaEventQuery`) asks whether work is done by the rank's host time h
without blocking the host. The querying rank keeps h as its clock in the bound X, since its next
records still start at h. The answer is known once the awaited work is placed (done iff its time
is <= h), or once the network has reached h with the work still unplaced: by the argument above,
unplaced work then ends at or after the network's time, so it is not done by h (a tie counts as
not done). The network does reach h: X is at most h, and nothing else holds it back.

Note: [Determinism]
Every simulated time is a function of the ranks' records and of the network's completions; the
completions are a function of the *set* of requests as long as the promises are kept (the
network's own Note [Determinism]); each rank's records depend only on its replies. So, by
induction along simulated time, every interleaving of the ranks' batches gives the same replies,
spans and collective results, bit for bit. Only *which* `submit` call returns a given reply
depends on the interleaving. Query results are sorted canonically, never in dict or arrival order.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from dataclasses import dataclass

from phantora.engine.intervals import union_length
from phantora.models.interference import NO_SHARING, GpuSharing
from phantora.models.power import CLOCKED_CLASSES, GpuPower, PowerCap
from phantora.models.network import CollectiveRequest, Completion, NetworkSimulator
from phantora.protocol.errors import CollectiveMismatchError, DeadlockError, ProtocolError
from phantora.protocol.symmetry import RankSymmetry
from phantora.protocol.records import (
    COLLECTIVE_OPS,
    NOT_DONE,
    ROOTED_OPS,
    CoalescedRecord,
    CollectiveRecord,
    EventRecordRecord,
    HostSleepRecord,
    HostTimeRecord,
    KernelRecord,
    RankFinished,
    Record,
    StreamWaitRecord,
    SyncReply,
    SyncRequest,
)


MatchKey = tuple[str, tuple[int, ...], int]
"""(tag, group, seq): what identifies one collective or point-to-point transfer across ranks."""


# --- results --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One matched collective (or send/recv pair) as the network ran it."""

    tag: str
    group: tuple[int, ...]
    seq: int
    op: str
    """The network op: a collective's name, or "send_recv" for a point-to-point transfer."""
    size_bytes: int
    root: int | None
    member_start_ns: tuple[int, ...]
    """When each member's stream reached it, in group order."""
    start_ns: int
    """When the operation started on the network: the last member's arrival."""
    end_ns: int
    algorithm: str
    protocol: str

    @property
    def key(self) -> MatchKey:
        return (self.tag, self.group, self.seq)


@dataclass(frozen=True, slots=True)
class Span:
    """Something that occupied a stream: a kernel, or an NCCL call (then `collectives` is set)."""

    rank: int
    stream_id: int
    name: str
    host_ns: int
    """When the host launched it."""
    start_ns: int
    end_ns: int
    flops: float = 0.0
    bytes: float = 0.0
    kernel_class: str = ""
    detail: str = ""
    collectives: tuple[CollectiveResult, ...] = ()
    """For an NCCL call: its operations (several for a coalesced call); empty for a kernel."""


@dataclass(frozen=True, slots=True)
class HostWait:
    """The host of a rank blocked on a SyncRequest from `from_ns` to `until_ns`."""

    request_id: int
    kind: str
    from_ns: int
    until_ns: int


# --- internal state -------------------------------------------------------------------------------
_ACTIVE, _BLOCKED, _QUERYING, _FINISHED = "active", "blocked", "querying", "finished"
_CLOCKED = (_ACTIVE, _QUERYING)
"""States whose host clock bounds the safe time (Note [Queries])."""


class _Mark:
    """One cudaEventRecord: its time once the stream reaches it, and the streams waiting for it."""

    __slots__ = ("time_ns", "waiters")

    def __init__(self) -> None:
        self.time_ns: int | None = None
        self.waiters: list[_Stream] = []


class _MarkItem:
    __slots__ = ("host_ns", "mark")

    def __init__(self, host_ns: int, mark: _Mark) -> None:
        self.host_ns = host_ns
        self.mark = mark


class _WaitItem:
    __slots__ = ("mark", "registered")

    def __init__(self, mark: _Mark) -> None:
        self.mark = mark
        self.registered = False


class _Call:
    """One NCCL call on one rank's stream: holds the stream until all its operations end."""

    __slots__ = ("stream", "host_ns", "name", "parts", "member_start_ns", "remaining", "end_ns")

    def __init__(self, stream: _Stream, host_ns: int, name: str) -> None:
        self.stream = stream
        self.host_ns = host_ns
        self.name = name
        self.parts: list[_Rendezvous] = []
        self.member_start_ns: int | None = None
        self.remaining = 0
        self.end_ns = 0


class _Rendezvous:
    """One operation across its members: filled as their records arrive and their streams reach it."""

    __slots__ = ("key", "net_op", "size_bytes", "root", "members", "ops", "calls", "unreached", "result",
                 "start_ns")

    def __init__(self, key: MatchKey, net_op: str, size_bytes: int, root: int | None,
                 members: tuple[int, ...]) -> None:
        self.key = key
        self.net_op = net_op
        self.size_bytes = size_bytes
        self.root = root
        self.members = members
        """The group's members that send records: all of them, or its representative ranks (Note
        [Representative ranks] in protocol/symmetry.py); the others reach it when their representative does."""
        self.ops: dict[int, str] = {}
        """The record op each member sent, by rank."""
        self.calls: dict[int, _Call] = {}
        self.unreached = len(members)
        """Members whose stream has not reached the operation yet (or whose record is still to come)."""
        self.result: CollectiveResult | None = None
        self.start_ns = 0
        """When the operation starts on the network (set when the last member reaches it)."""


class _Stream:
    __slots__ = ("rank", "stream_id", "tail_ns", "queue", "spans", "scheduled", "waiting")

    def __init__(self, rank: _Rank, stream_id: int) -> None:
        self.rank = rank
        self.stream_id = stream_id
        self.tail_ns = 0
        self.queue: deque = deque()
        self.spans: list[Span] = []
        self.scheduled = False
        self.waiting = False
        """Its next kernel waits in `Coordinator._waiting_kernels` (Note [Compute beside NCCL])."""


class _Rank:
    __slots__ = ("rank", "host_ns", "state", "streams", "marks", "sync", "sync_mark", "waits", "sleeps",
                 "next_kernel_ns", "holding")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.host_ns = 0
        self.next_kernel_ns = 0
        """The earliest start of the GPU's next kernel: its last placed kernel's end plus the sharing
        model's kernel gap (Note [One kernel at a time])."""
        self.holding: list[tuple[_Call, float]] = []
        """NCCL calls that hold SMs of the GPU (reached by their stream, not ended), with the factor by which
        they slow a GEMM or attention kernel (Note [Compute beside NCCL])."""
        self.state = _ACTIVE
        self.streams: dict[int, _Stream] = {}
        self.marks: dict[int, _Mark] = {}
        self.sync: SyncRequest | None = None
        self.sync_mark: _Mark | None = None
        self.waits: list[HostWait] = []
        self.sleeps: list[tuple[int, int]] = []
        """[from, until) of the program's own sleeps (HostSleepRecord), in order, touching ones joined."""

    def stream(self, stream_id: int) -> _Stream:
        s = self.streams.get(stream_id)
        if s is None:
            if not isinstance(stream_id, int) or stream_id < 0:
                raise ProtocolError(f"rank {self.rank}: stream id must be a non-negative integer, got {stream_id!r}")
            s = self.streams[stream_id] = _Stream(self, stream_id)
        return s


class Coordinator:
    """Owns every rank's GPU timeline and the network; answers sync requests. See the module Notes."""

    def __init__(self, world_size: int, network: NetworkSimulator, *, launch_latency_ns: int = 0,
                 sharing: GpuSharing = NO_SHARING, power: PowerCap | None = None,
                 symmetry: RankSymmetry | None = None, clock_factor: float = 1.0) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if clock_factor < 1:
            raise ValueError(f"clock_factor must be >= 1 (the slowest chip's), got {clock_factor}")
        if launch_latency_ns < 0:
            raise ValueError(f"launch_latency_ns must be >= 0, got {launch_latency_ns}")
        self.world_size = world_size
        self.symmetry = symmetry if symmetry is not None else RankSymmetry.everyone(world_size)
        if self.symmetry.world_size != world_size:
            raise ValueError(f"the rank symmetry is for {self.symmetry.world_size} ranks, not {world_size}")
        if self.symmetry.mirrored and getattr(network, "compute_of", None) != self.symmetry.representative:
            raise ValueError("with representative ranks the network must know whose compute each GPU's is: "
                             "NetworkSimulator(..., compute_of=symmetry.representative)")
        self.representatives = self.symmetry.representatives
        """The ranks that send records (Note [Representative ranks]); every rank without mirrors."""
        self.processes = len(self.representatives)
        self.network = network
        self.launch_latency_ns = launch_latency_ns
        """Time from a launch call on the host to the earliest moment the work can start on its stream."""
        self._ranks = {r: _Rank(r) for r in self.representatives}
        self._images: set[MatchKey] = set()
        """Network keys of the copies of local groups' operations on the mirrors, in flight."""
        self._rendezvous: dict[MatchKey, _Rendezvous] = {}
        self._in_network: dict[MatchKey, _Rendezvous] = {}
        self._results: list[CollectiveResult] = []
        self._work: list[_Stream] = []
        self._touched: set[int] = set()
        """Ranks whose sync may have become answerable."""
        self._querying: set[int] = set()
        """Ranks waiting for the answer to a query, which the network's progress alone can decide."""
        self._bound: int | None = 0
        self._bound_dirty = False
        self.sharing = sharing
        self._shared = sharing != NO_SHARING
        slows = getattr(network, "sharing", NO_SHARING)
        if self._shared and (slows.nccl_slowdown, slows.nccl_factors()) != (sharing.nccl_slowdown, sharing.nccl_factors()):
            raise ValueError(f"the network's busy_slowdown must be the sharing model's nccl_slowdown "
                             f"({sharing.nccl_slowdown}, by operation {sharing.nccl_factors()}): "
                             f"NetworkSimulator(..., sharing=...)")
        if power is not None and not self._shared:
            raise ValueError("a power cap needs a sharing model: kernels must be placed in time order (Note [Power cap])")
        self._power = {r: GpuPower(power) for r in self.representatives} if power is not None else None
        self.clock_factor = clock_factor
        """Every GPU's GEMM and attention kernels take this many times their time (Note [The slowest chip's pace])."""
        self._waiting_kernels: list[tuple[int, int, int, int, int]] = []
        """(start, ready, host_ns, rank, stream id) of each stream's next kernel, in the order the GPU
        would run them (Note [One kernel at a time])."""

    # --- the loop -------------------------------------------------------------------------------
    def submit(self, rank: int, records: list[Record]) -> list[tuple[int, SyncReply]]:
        """Take one batch of `rank`'s records (program order); return every reply now final, of any rank."""
        rk = self._ranks.get(rank)
        if rk is None:
            raise ProtocolError(f"rank {rank} is not one of the {self.processes} ranks that run")
        for record in records:
            self._accept(rk, record)
        self._settle()
        replies = self._release()
        replies += self._advance()
        self._check_progress()
        replies.sort(key=lambda rr: rr[0])
        return replies

    def _advance(self) -> list[tuple[int, SyncReply]]:
        """Advance the network to the safe time X of Note [Conservative safe time], repeatedly."""
        net = self.network
        replies: list[tuple[int, SyncReply]] = []
        while True:
            if self._waiting_kernels and self._waiting_kernels[0][0] <= net.now_ns:
                self._wake_kernels()
                self._settle()
                replies += self._release()
                continue
            bound = self._active_bound()
            if self._waiting_kernels:
                first = self._waiting_kernels[0][0]
                bound = first if bound is None else min(bound, first)
            nxt = net.next_event_ns()
            if nxt is not None and (bound is None or nxt <= bound):
                safe_ns = nxt
            elif bound is not None and bound > net.now_ns:
                safe_ns = bound
            else:
                return replies
            for completion in net.advance_to(safe_ns):
                self._complete(completion)
            self._settle()
            replies += self._release()

    def _wake_kernels(self) -> None:
        """Place the waiting kernels that start by the network's time, in the order the GPU picks them
        (Note [One kernel at a time]); one that finds its GPU taken waits again."""
        now = self.network.now_ns
        heap = self._waiting_kernels
        while heap and heap[0][0] <= now:
            _, _, _, rank, stream_id = heapq.heappop(heap)
            s = self._ranks[rank].streams[stream_id]
            s.waiting = False
            self._pump(s, due=True)

    def _kernel_factor(self, rk: _Rank, start_ns: int, kernel_class: str) -> float:
        """Note [Compute beside NCCL]: the largest compute slowdown of the NCCL operations of `rk` in flight,
        and for a GEMM or attention kernel, of its NCCL kernels that hold SMs while they wait for their peers."""
        rank = rk.rank
        factor = max((self.sharing.compute_factor(rv.net_op) for rv in self._in_network.values()
                      if rv.start_ns < start_ns and rank in rv.key[1]), default=1.0)
        if rk.holding and kernel_class in CLOCKED_CLASSES:
            factor = max(factor, max((held for call, held in rk.holding if call.member_start_ns < start_ns),
                                     default=1.0))
        return factor

    def _at_slowest_chip(self, kernel_class: str, duration: int) -> int:
        """Note [The slowest chip's pace]: a GEMM or attention kernel's duration on the job's slowest chip."""
        if self.clock_factor == 1.0 or kernel_class not in CLOCKED_CLASSES:
            return duration
        return round(duration * self.clock_factor)

    def power(self, rank: int) -> GpuPower | None:
        """`rank`'s GPU's power state (its average demanded power, how much the cap slowed it); None without a cap."""
        return None if self._power is None else self._power[rank]

    # --- receiving --------------------------------------------------------------------------------
    def _accept(self, rk: _Rank, record: Record) -> None:
        if rk.state != _ACTIVE:
            why = (f"while waiting for the reply to SyncRequest {rk.sync.request_id}" if rk.sync is not None
                   else "after RankFinished")
            raise ProtocolError(f"rank {rk.rank}: {type(record).__name__} received {why}")
        host_ns = record.host_ns
        if not isinstance(host_ns, int) or host_ns < rk.host_ns:
            raise ProtocolError(f"rank {rk.rank}: {type(record).__name__} at host time {host_ns!r} ns is "
                                f"before the rank's clock {rk.host_ns} ns (host time only moves forward)")
        rk.host_ns = host_ns
        self._bound_dirty = True
        kind = type(record)
        if kind is KernelRecord:
            if not isinstance(record.duration_ns, int) or record.duration_ns < 0:
                raise ProtocolError(f"rank {rk.rank}: kernel {record.name!r} has duration {record.duration_ns!r}; "
                                    "it must be a non-negative integer of nanoseconds")
            self._enqueue(rk.stream(record.stream_id), record)
        elif kind is CollectiveRecord:
            s = rk.stream(record.stream_id)
            call = _Call(s, host_ns, record.op)
            self._join(rk, call, record)
            self._enqueue(s, call)
        elif kind is CoalescedRecord:
            s = rk.stream(record.stream_id)
            if not record.parts:
                raise ProtocolError(f"rank {rk.rank}: empty CoalescedRecord")
            call = _Call(s, host_ns, "coalesced[" + ",".join(p.op for p in record.parts) + "]")
            for part in record.parts:
                if type(part) is not CollectiveRecord or part.stream_id != record.stream_id or part.host_ns > host_ns:
                    raise ProtocolError(f"rank {rk.rank}: a CoalescedRecord part must be a CollectiveRecord on the "
                                        f"same stream launched no later than the group, got {part!r}")
                self._join(rk, call, part)
            self._enqueue(s, call)
        elif kind is EventRecordRecord:
            mark = rk.marks[record.event_id] = _Mark()
            self._enqueue(rk.stream(record.stream_id), _MarkItem(host_ns, mark))
        elif kind is StreamWaitRecord:
            s = rk.stream(record.stream_id)
            mark = rk.marks.get(record.event_id)
            if mark is not None:  # waiting on an event never recorded is a no-op
                self._enqueue(s, _WaitItem(mark))
        elif kind is SyncRequest:
            if record.kind == "stream":
                if record.stream_id is None:
                    raise ProtocolError(f"rank {rk.rank}: SyncRequest of kind 'stream' without a stream_id")
            elif record.kind == "event":
                if record.event_id is None:
                    raise ProtocolError(f"rank {rk.rank}: SyncRequest of kind 'event' without an event_id")
                rk.sync_mark = rk.marks.get(record.event_id)
            elif record.kind != "device":
                raise ProtocolError(f"rank {rk.rank}: unknown SyncRequest kind {record.kind!r} "
                                    "(expected 'device', 'stream' or 'event')")
            rk.state = _QUERYING if record.query else _BLOCKED
            rk.sync = record
            self._touched.add(rk.rank)
            if record.query:
                self._querying.add(rk.rank)
        elif kind is HostTimeRecord:
            pass
        elif kind is HostSleepRecord:
            if not isinstance(record.until_ns, int) or record.until_ns < host_ns:
                raise ProtocolError(f"rank {rk.rank}: HostSleepRecord ends at {record.until_ns!r} ns, before it "
                                    f"starts ({host_ns} ns)")
            rk.host_ns = record.until_ns
            if rk.sleeps and rk.sleeps[-1][1] == host_ns:
                rk.sleeps[-1] = (rk.sleeps[-1][0], record.until_ns)
            elif record.until_ns > host_ns:
                rk.sleeps.append((host_ns, record.until_ns))
        elif kind is RankFinished:
            rk.state = _FINISHED
        else:
            raise ProtocolError(f"rank {rk.rank}: unknown record type {kind.__name__}")

    def _join(self, rk: _Rank, call: _Call, rec: CollectiveRecord) -> None:
        """Register `rk`'s part of an operation with its rendezvous, checking it matches the others'."""
        where = f"rank {rk.rank}: {rec.op} (tag {rec.tag!r}, group {rec.group}, seq {rec.seq})"
        if rec.op not in COLLECTIVE_OPS:
            raise ProtocolError(f"{where}: unknown op; supported: {', '.join(COLLECTIVE_OPS)}")
        if not isinstance(rec.seq, int) or rec.seq < 0 or not isinstance(rec.tag, str):
            raise ProtocolError(f"{where}: seq must be a non-negative integer and tag a string")
        if not isinstance(rec.size_bytes, int) or rec.size_bytes < 0:
            raise ProtocolError(f"{where}: size_bytes must be a non-negative integer, got {rec.size_bytes!r}")
        group = tuple(rec.group)
        if rk.rank not in group:
            raise CollectiveMismatchError(f"{where}: the rank is not a member of the group")
        if any(not 0 <= g < self.world_size for g in group) or len(set(group)) != len(group):
            raise CollectiveMismatchError(f"{where}: the group must list distinct ranks of the world "
                                          f"(0..{self.world_size - 1})")
        if rec.op in ("send", "recv"):
            if len(group) != 2 or rk.rank != group[0 if rec.op == "send" else 1]:
                raise CollectiveMismatchError(f"{where}: a send/recv's group is (src, dst) with the sender first")
            net_op, root = "send_recv", None
        else:
            net_op, root = rec.op, rec.root
            if (rec.op in ROOTED_OPS) != (root is not None) or (root is not None and root not in group):
                raise CollectiveMismatchError(f"{where}: root {root} (broadcast, reduce, gather and scatter "
                                              "need a root in the group; other ops none)")
        # Note [Uneven all-to-alls]: with split sizes (a mixture-of-experts layer's token exchange),
        # each member of an all-to-all sends its own amount. The network is given the largest: the
        # member with the most to move is the last to finish, and NCCL's call ends for all together.
        if not self.symmetry.admits(group, whole=net_op == "send_recv"):
            raise ProtocolError(f"{where}: the group does not fit the representative ranks' folding "
                                f"{self.symmetry.axes}; the rank should have stopped before using it")
        key: MatchKey = (rec.tag, group, rec.seq)
        rv = self._rendezvous.get(key)
        if rv is None:
            members = tuple(g for g in group if g in self._ranks)
            rv = self._rendezvous[key] = _Rendezvous(key, net_op, rec.size_bytes, root, members)
        else:
            if rv.result is not None or rk.rank in rv.ops:
                raise CollectiveMismatchError(f"{where}: this rank already issued this (tag, group, seq); "
                                              "sequence numbers must not repeat")
            other, other_op = next(iter(sorted(rv.ops.items())))
            if net_op == "all_to_all" == rv.net_op:  # Note [Uneven all-to-alls]
                rv.size_bytes = max(rv.size_bytes, rec.size_bytes)
            elif (rv.net_op, rv.size_bytes, rv.root) != (net_op, rec.size_bytes, root) or (
                    net_op == "send_recv" and rec.op == other_op):
                raise CollectiveMismatchError(
                    f"{where}, size {rec.size_bytes} B, root {root} does not match rank {other}'s {other_op} "
                    f"of size {rv.size_bytes} B, root {rv.root}")
        rv.ops[rk.rank] = rec.op
        rv.calls[rk.rank] = call
        call.parts.append(rv)
        call.remaining += 1

    def _enqueue(self, s: _Stream, item) -> None:
        s.queue.append(item)
        self._schedule(s)

    def _schedule(self, s: _Stream) -> None:
        if not s.scheduled:
            s.scheduled = True
            self._work.append(s)

    # --- placing and matching ---------------------------------------------------------------------
    def _settle(self) -> None:
        """Place every queued item whose inputs are known (Note [Placing work on streams])."""
        while self._work:
            s = self._work.pop()
            s.scheduled = False
            self._pump(s)

    def _pump(self, s: _Stream, due: bool = False) -> None:
        """Place what can be placed at the head of `s`; `due`: its next kernel was just taken off the
        waiting heap at the network's time, in GPU order (Note [One kernel at a time])."""
        latency = self.launch_latency_ns
        queue = s.queue
        rk = s.rank
        rank = rk.rank
        while queue:
            item = queue[0]
            kind = type(item)
            if kind is KernelRecord:
                ready = start = max(item.host_ns + latency, s.tail_ns)
                duration = item.duration_ns
                if self._shared:
                    engine = item.kernel_class != "memcpy"
                    if engine:
                        start = max(ready, rk.next_kernel_ns)
                    now = self.network.now_ns
                    if start > now or not due:  # Note [Compute beside NCCL]
                        if not s.waiting:
                            s.waiting = True
                            heapq.heappush(self._waiting_kernels, (start, ready, item.host_ns, rank, s.stream_id))
                        break
                    assert start == now, (start, now)
                    due = False
                    duration = round(duration * self._kernel_factor(rk, start, item.kernel_class))
                    duration = self._at_slowest_chip(item.kernel_class, duration)
                    if self._power is not None:  # Note [Power cap]
                        duration = self._power[rank].place(start, item.kernel_class, item.flops, item.bytes, duration,
                                                           self.clock_factor)
                    if engine:
                        rk.next_kernel_ns = start + duration + self.sharing.kernel_gap_ns
                    self.network.mark_compute(rank, start, start + duration)
                else:
                    duration = self._at_slowest_chip(item.kernel_class, duration)
                end = start + duration
                # spans stay until the reports; their strings repeat every step: one copy each (~40% of a span)
                s.spans.append(Span(rank, s.stream_id, sys.intern(item.name), item.host_ns, start, end, item.flops,
                                    item.bytes, sys.intern(item.kernel_class), sys.intern(item.detail)))
                s.tail_ns = end
            elif kind is _MarkItem:
                s.tail_ns = max(item.host_ns + latency, s.tail_ns)
                item.mark.time_ns = s.tail_ns
                for waiter in item.mark.waiters:
                    self._schedule(waiter)
                item.mark.waiters = []
            elif kind is _WaitItem:
                mark = item.mark
                if mark.time_ns is None:
                    if not item.registered:
                        item.registered = True
                        mark.waiters.append(s)
                    break
                s.tail_ns = max(s.tail_ns, mark.time_ns)
            else:  # an NCCL call: occupies the stream until `_complete` has seen all its operations end
                if item.member_start_ns is None:
                    item.member_start_ns = max(item.host_ns + latency, s.tail_ns)
                    if self._shared:
                        held = max(self.sharing.held_sm_factor(rv.net_op, rv.size_bytes) for rv in item.parts)
                        if held > 1.0:
                            rk.holding.append((item, held))
                    for rv in item.parts:
                        rv.unreached -= 1
                        if rv.unreached == 0:
                            self._launch(rv)
                break
            queue.popleft()
        self._touched.add(rank)

    def _launch(self, rv: _Rendezvous) -> None:
        """Every member has reached the operation: it starts on the network when the last one did."""
        tag, group, seq = rv.key
        start_ns = max(rv.calls[g].member_start_ns for g in rv.members)
        rv.start_ns = start_ns
        self._in_network[rv.key] = rv
        self._submit(rv.net_op, group, rv.size_bytes, start_ns, rv.key, rv.root)
        for image in self.symmetry.images(group):  # Note [Representative ranks]
            key = (tag, image, seq)
            root = None if rv.root is None else image[group.index(rv.root)]
            self._images.add(key)
            self._submit(rv.net_op, image, rv.size_bytes, start_ns, key, root)

    def _submit(self, net_op: str, group: tuple[int, ...], size_bytes: int, start_ns: int, key: MatchKey,
                root: int | None) -> None:
        if net_op == "send_recv":
            self.network.submit_p2p(src=group[0], dst=group[1], size_bytes=size_bytes, start_ns=start_ns, key=key)
        else:
            self.network.submit(CollectiveRequest(op=net_op, group=group, size_bytes=size_bytes, start_ns=start_ns,
                                                  key=key, root=root))

    def _complete(self, c: Completion) -> None:
        if c.key in self._images:  # a mirror's copy: it started and ends with its group, no stream waits on it
            self._images.remove(c.key)
            return
        rv = self._in_network.pop(c.key)
        tag, group, seq = rv.key
        representative = self.symmetry.representative
        rv.result = CollectiveResult(tag, group, seq, rv.net_op, rv.size_bytes, rv.root,
                                     tuple(rv.calls[representative(g)].member_start_ns for g in group),
                                     c.start_ns, c.end_ns, c.algorithm, c.protocol)
        self._results.append(rv.result)
        for g in rv.members:
            call = rv.calls[g]
            call.end_ns = max(call.end_ns, c.end_ns)
            call.remaining -= 1
            if call.remaining == 0:
                s = call.stream
                if s.rank.holding:
                    s.rank.holding = [h for h in s.rank.holding if h[0] is not call]
                assert s.queue and s.queue[0] is call
                s.queue.popleft()
                s.tail_ns = call.end_ns
                s.spans.append(Span(g, s.stream_id, call.name, call.host_ns, call.member_start_ns, call.end_ns,
                                    kernel_class="nccl", collectives=tuple(p.result for p in call.parts)))
                self._schedule(s)
        rv.calls.clear()  # the calls are done; keep ops and result to reject a repeated sequence number

    # --- replying ---------------------------------------------------------------------------------
    def _release(self) -> list[tuple[int, SyncReply]]:
        """Replies whose awaited work is all placed (hence final)."""
        replies = []
        for r in sorted(self._touched | self._querying):
            rk = self._ranks[r]
            if rk.state == _BLOCKED:
                ready_ns = self._ready_ns(rk)
                if ready_ns is not None:
                    replies.append((r, self._reply(rk, ready_ns)))
            elif rk.state == _QUERYING:
                reply = self._answer_query(rk)
                if reply is not None:
                    replies.append((r, reply))
        self._touched.clear()
        return replies

    def _answer_query(self, rk: _Rank) -> SyncReply | None:
        """Note [Queries]: done by the request's host time, not done, or not known yet."""
        req = rk.sync
        ready_ns = self._ready_ns(rk)
        if ready_ns is None:
            if self.network.now_ns < req.host_ns:
                return None
            ready_ns = NOT_DONE
        elif ready_ns > req.host_ns:
            ready_ns = NOT_DONE
        rk.state = _ACTIVE
        rk.sync = None
        rk.sync_mark = None
        self._querying.discard(rk.rank)
        return SyncReply(req.request_id, req.host_ns, ready_ns)

    def _ready_ns(self, rk: _Rank) -> int | None:
        """When the work `rk` waits for is done, or None while some of it is unplaced."""
        req = rk.sync
        assert req is not None
        if req.kind == "device":
            if any(s.queue for s in rk.streams.values()):
                return None
            return max((s.tail_ns for s in rk.streams.values()), default=0)
        if req.kind == "stream":
            s = rk.streams.get(req.stream_id)
            if s is None:
                return 0
            return None if s.queue else s.tail_ns
        mark = rk.sync_mark
        if mark is None:  # an event never recorded is complete
            return 0
        return mark.time_ns

    def _reply(self, rk: _Rank, ready_ns: int) -> SyncReply:
        req = rk.sync
        host_ns = max(req.host_ns, ready_ns)
        rk.waits.append(HostWait(req.request_id, req.kind, req.host_ns, host_ns))
        rk.host_ns = host_ns
        rk.state = _ACTIVE
        rk.sync = None
        rk.sync_mark = None
        self._bound_dirty = True
        return SyncReply(req.request_id, host_ns, ready_ns)

    def _active_bound(self) -> int | None:
        """The least host clock among active ranks (None if no rank is active)."""
        if self._bound_dirty:
            self._bound = min((rk.host_ns for rk in self._ranks.values() if rk.state in _CLOCKED), default=None)
            self._bound_dirty = False
            assert self._bound is None or self._bound >= self.network.now_ns, (self._bound, self.network.now_ns)
        return self._bound

    def _check_progress(self) -> None:
        """With no rank active and the network idle, anything still waiting waits forever."""
        if self._active_bound() is not None or self.network.next_event_ns() is not None or self._waiting_kernels:
            return
        blocked = [rk for rk in self._ranks.values() if rk.state == _BLOCKED]
        if blocked or self._open_rendezvous() or any(s.queue for rk in self._ranks.values() for s in rk.streams.values()):
            raise DeadlockError("phantora: the simulated program cannot progress (on a real cluster it would hang):\n"
                                + self.describe_pending())

    # --- queries ----------------------------------------------------------------------------------
    @property
    def safe_ns(self) -> int:
        """The time up to which the network has been advanced (everything before it is final)."""
        return self.network.now_ns

    @property
    def done(self) -> bool:
        """Every rank has finished and all its work is placed."""
        return (all(rk.state == _FINISHED for rk in self._ranks.values()) and not self._open_rendezvous()
                and not any(s.queue for rk in self._ranks.values() for s in rk.streams.values()))

    def host_ns(self, rank: int) -> int:
        """The rank's host clock: the host time of its last record (or its last reply)."""
        return self._ranks[rank].host_ns

    def is_finished(self, rank: int) -> bool:
        return self._ranks[rank].state == _FINISHED

    def spans(self, rank: int, stream_id: int | None = None) -> list[Span]:
        """Placed kernels and NCCL calls of `rank` (one stream, or all: by stream id, then in stream order)."""
        streams = self._ranks[rank].streams
        ids = sorted(streams) if stream_id is None else [stream_id] if stream_id in streams else []
        return [span for sid in ids for span in streams[sid].spans]

    def stream_ids(self, rank: int) -> list[int]:
        return sorted(self._ranks[rank].streams)

    def stream_tail_ns(self, rank: int, stream_id: int) -> int | None:
        """When everything placed on the stream ends (None while something on it is unplaced)."""
        s = self._ranks[rank].streams.get(stream_id)
        if s is None:
            return 0
        return None if s.queue else s.tail_ns

    def collectives(self) -> list[CollectiveResult]:
        """Every completed operation, ordered by (start_ns, end_ns, tag, group, seq)."""
        return sorted(self._results, key=lambda c: (c.start_ns, c.end_ns, c.tag, c.group, c.seq))

    def host_waits(self, rank: int) -> list[HostWait]:
        return list(self._ranks[rank].waits)

    def host_sleeps(self, rank: int) -> list[tuple[int, int]]:
        """[from, until) of each of `rank`'s own sleeps (`time.sleep` in the program), in order."""
        return list(self._ranks[rank].sleeps)

    def host_blocked_ns(self, rank: int) -> int:
        return sum(w.until_ns - w.from_ns for w in self._ranks[rank].waits)

    def busy_ns(self, rank: int, until_ns: int | None = None) -> int:
        """Time during which at least one kernel or NCCL call occupied a stream of `rank`'s device
        (overlapping streams count once; an NCCL call counts from its member start, spin included)."""
        return union_length(((s.start_ns, s.end_ns) for s in self.spans(rank)), until_ns)

    def describe_pending(self) -> str:
        """One line per unmatched operation and per blocked rank: what is missing."""
        lines = []
        for rv in self._open_rendezvous():
            tag, group, seq = rv.key
            missing = [g for g in rv.members if g not in rv.ops]
            issued = ", ".join(f"rank {g} {op}" for g, op in sorted(rv.ops.items()))
            waiting = [g for g, call in sorted(rv.calls.items()) if call.member_start_ns is None]
            line = f"  {rv.net_op} tag {tag!r} group {group} seq {seq}: issued by {issued}"
            if missing:
                line += f"; never issued by rank(s) {', '.join(map(str, missing))}"
            if waiting:
                line += f"; queued behind earlier work on rank(s) {', '.join(map(str, waiting))}"
            lines.append(line)
        for rk in self._ranks.values():
            if rk.state == _BLOCKED:
                req = rk.sync
                what = {"device": "the device", "stream": f"stream {req.stream_id}",
                        "event": f"event {req.event_id}"}[req.kind]
                lines.append(f"  rank {rk.rank} waits (SyncRequest {req.request_id} at {req.host_ns} ns) for {what}")
        return "\n".join(lines) if lines else "  nothing pending"

    def _open_rendezvous(self) -> list[_Rendezvous]:
        return sorted((rv for rv in self._rendezvous.values() if rv.result is None and rv.key not in self._in_network),
                      key=lambda rv: rv.key)
