"""The coordinator's engine core: hand-derived schedules, safe replies, determinism under any interleaving.

Hand-derived cases run on `FixedNetwork`, where an operation takes exactly `size_bytes` ns on the
network whatever else runs, so the expected times can be worked out on paper. The safety and
determinism cases run on the real NetworkSimulator, where concurrent transfers share links.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass, field

import pytest

from phantora.engine.coordinator import Coordinator
from phantora.models.interference import NO_SHARING, GpuSharing
from phantora.models.power import PowerCap
from phantora.models.network import (
    CollectiveRequest,
    Completion,
    LateRequestError,
    NetworkSimulator,
    Topology,
)
from phantora.protocol.errors import CollectiveMismatchError, DeadlockError, ProtocolError
from phantora.protocol.symmetry import Axis, RankSymmetry
from phantora.specs.cluster import cluster_from_flags
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

MiB = 1 << 20


class FixedNetwork:
    """Every operation takes `size_bytes` ns on the network, alone or not. Enforces the promise."""

    def __init__(self) -> None:
        self.now_ns = 0
        self._flight: dict = {}
        self.safe_calls: list[int] = []

    @property
    def in_flight(self) -> int:
        return len(self._flight)

    def submit(self, req: CollectiveRequest) -> None:
        if req.start_ns < self.now_ns:
            raise LateRequestError(f"{req.key} starts at {req.start_ns}, before the safe time {self.now_ns}")
        self._flight[req.key] = Completion(req.key, req.op, req.start_ns, req.start_ns + req.size_bytes,
                                           "ring", "Simple")

    def submit_p2p(self, *, src, dst, size_bytes, start_ns, key) -> None:
        self.submit(CollectiveRequest("send_recv", (src, dst), size_bytes, start_ns, key))

    def next_event_ns(self):
        return min((c.end_ns for c in self._flight.values()), default=None)

    def advance_to(self, safe_ns: int) -> list[Completion]:
        assert safe_ns >= self.now_ns
        done = sorted((c for c in self._flight.values() if c.end_ns <= safe_ns), key=lambda c: (c.end_ns, c.key))
        for c in done:
            del self._flight[c.key]
        self.now_ns = safe_ns
        self.safe_calls.append(safe_ns)
        return done


def K(stream, host, dur, name="k"):
    return KernelRecord(stream, host, dur, name)


def AR(stream, host, group, seq, size, tag="pg"):
    return CollectiveRecord(stream, host, tuple(group), seq, "all_reduce", size, None, tag)


def SEND(stream, host, src, dst, seq, size, tag="p2p"):
    return CollectiveRecord(stream, host, (src, dst), seq, "send", size, None, tag)


def RECV(stream, host, src, dst, seq, size, tag="p2p"):
    return CollectiveRecord(stream, host, (src, dst), seq, "recv", size, None, tag)


def SYNC(rid, host, kind="device", stream=None, event=None):
    return SyncRequest(rid, host, kind, stream, event)


def times(spans):
    return [(s.name, s.start_ns, s.end_ns) for s in spans]


def replies_of(*submits):
    out = {}
    for batch in submits:
        for rank, reply in batch:
            out.setdefault(rank, []).append(reply)
    return out


# --- hand-derived schedules -------------------------------------------------------------------------
def test_all_reduce_starts_when_the_later_rank_arrives():
    c = Coordinator(2, FixedNetwork())
    first = c.submit(0, [K(0, 0, 10), AR(0, 1, (0, 1), 0, 100), K(0, 3, 5, "after"), SYNC(1, 4)])
    assert first == []  # rank 1 may still launch anything from time 0 on
    second = c.submit(1, [K(0, 0, 30), AR(0, 2, (0, 1), 0, 100), SYNC(1, 5)])
    assert second == [(0, SyncReply(1, 135, 135)), (1, SyncReply(1, 130, 130))]
    # rank 0's stream reaches the all_reduce at 10 and spins until rank 1 arrives at 30
    assert times(c.spans(0)) == [("k", 0, 10), ("all_reduce", 10, 130), ("after", 130, 135)]
    assert times(c.spans(1)) == [("k", 0, 30), ("all_reduce", 30, 130)]
    [ar] = c.collectives()
    assert (ar.start_ns, ar.end_ns, ar.member_start_ns, ar.op, ar.algorithm) == (30, 130, (10, 30), "all_reduce", "ring")
    assert c.spans(0)[1].collectives == (ar,)
    assert c.host_waits(0)[0].from_ns == 4 and c.host_blocked_ns(0) == 131


def test_launch_latency_delays_kernels_and_collectives():
    c = Coordinator(2, FixedNetwork(), launch_latency_ns=7)
    c.submit(0, [K(0, 0, 10), AR(0, 20, (0, 1), 0, 100), RankFinished(30)])
    c.submit(1, [AR(0, 3, (0, 1), 0, 100), RankFinished(30)])
    assert times(c.spans(0)) == [("k", 7, 17), ("all_reduce", 27, 127)]
    assert times(c.spans(1)) == [("all_reduce", 10, 127)]
    assert c.done


def test_two_streams_overlap_compute_with_a_collective():
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [AR(1, 0, (0, 1), 0, 100), K(0, 1, 50), SYNC(1, 2)])
    [(rank, reply)] = c.submit(1, [AR(1, 0, (0, 1), 0, 100), RankFinished(1)])
    assert (rank, reply) == (0, SyncReply(1, 100, 100))
    assert times(c.spans(0, 1)) == [("all_reduce", 0, 100)]
    assert times(c.spans(0, 0)) == [("k", 1, 51)]
    assert c.busy_ns(0) == 100 and c.busy_ns(0, until_ns=40) == 40


def test_cross_stream_event_wait():
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [AR(1, 0, (0, 1), 0, 100), EventRecordRecord(7, 1, 1), K(0, 1, 20, "before"),
                 StreamWaitRecord(0, 7, 2), K(0, 3, 10, "after"), SYNC(1, 4, "event", event=7)])
    [(_, reply)] = c.submit(1, [AR(1, 0, (0, 1), 0, 100), RankFinished(1)])
    assert reply == SyncReply(1, 100, 100)
    assert times(c.spans(0, 0)) == [("before", 1, 21), ("after", 100, 110)]
    [(_, reply)] = c.submit(0, [SYNC(2, 101, "stream", stream=0)])
    assert reply == SyncReply(2, 110, 110)


def test_waiting_on_an_event_never_recorded_is_a_no_op():
    c = Coordinator(1, FixedNetwork())
    [(_, reply)] = c.submit(0, [StreamWaitRecord(0, 3, 0), K(0, 1, 5), SYNC(1, 2, "event", event=3)])
    assert reply == SyncReply(1, 2, 0)
    assert c.submit(0, [SYNC(2, 3, "device")]) == [(0, SyncReply(2, 6, 6))]


def test_event_re_recorded_refers_to_the_latest_record():
    c = Coordinator(1, FixedNetwork())
    recs = [K(0, 0, 10), EventRecordRecord(1, 0, 1), K(0, 2, 10), StreamWaitRecord(1, 1, 3),
            K(1, 4, 1, "a"), EventRecordRecord(1, 0, 5), StreamWaitRecord(1, 1, 6), K(1, 7, 1, "b"),
            SYNC(1, 8)]
    [(_, reply)] = c.submit(0, recs)
    assert times(c.spans(0, 1)) == [("a", 10, 11), ("b", 20, 21)]
    assert reply.host_ns == 21


def test_stream_sync_reply_equals_the_collective_end():
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [K(0, 0, 500), AR(1, 1, (0, 1), 0, 100), SYNC(1, 2, "stream", stream=1)])
    [(_, reply)] = c.submit(1, [AR(0, 30, (0, 1), 0, 100), RankFinished(31)])
    assert reply == SyncReply(1, 130, 130)  # the all_reduce's end, not the long kernel's
    assert c.submit(0, [SYNC(2, 140)]) == [(0, SyncReply(2, 500, 500))]


def test_send_recv_pair():
    c = Coordinator(2, FixedNetwork())
    assert c.submit(0, [SEND(0, 5, 0, 1, 0, 100), SYNC(1, 6)]) == []
    replies = c.submit(1, [RECV(0, 20, 0, 1, 0, 100), SYNC(1, 21)])
    assert replies == [(0, SyncReply(1, 120, 120)), (1, SyncReply(1, 120, 120))]
    assert times(c.spans(0)) == [("send", 5, 120)]
    assert times(c.spans(1)) == [("recv", 20, 120)]
    [p2p] = c.collectives()
    assert (p2p.op, p2p.group, p2p.start_ns, p2p.member_start_ns) == ("send_recv", (0, 1), 20, (5, 20))


def test_coalesced_exchange_completes_where_plain_calls_deadlock():
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [CoalescedRecord(0, 3, (SEND(0, 1, 0, 1, 0, 50), RECV(0, 2, 1, 0, 0, 60))), SYNC(1, 4)])
    replies = c.submit(1, [CoalescedRecord(0, 10, (SEND(0, 10, 1, 0, 0, 60), RECV(0, 10, 0, 1, 0, 50))), SYNC(1, 11)])
    assert replies == [(0, SyncReply(1, 70, 70)), (1, SyncReply(1, 70, 70))]
    assert times(c.spans(0)) == [("coalesced[send,recv]", 3, 70)]
    assert times(c.spans(1)) == [("coalesced[send,recv]", 10, 70)]
    assert [(r.group, r.start_ns, r.end_ns) for r in c.collectives()] == [((0, 1), 10, 60), ((1, 0), 10, 70)]

    d = Coordinator(2, FixedNetwork())
    d.submit(0, [SEND(0, 0, 0, 1, 0, 50), RECV(0, 1, 1, 0, 0, 60), SYNC(1, 2)])
    with pytest.raises(DeadlockError, match=r"queued behind earlier work on rank\(s\) 0"):
        d.submit(1, [SEND(0, 0, 1, 0, 0, 60), RECV(0, 1, 0, 1, 0, 50), SYNC(1, 2)])


def pipeline_program(stage: int, stages: int, microbatches: int, fwd_ns: int, msg_bytes: int) -> list:
    """Forward passes of a GPipe-like pipeline on one stream: recv, compute, send; host +1 ns per call."""
    recs, host = [], 0
    for mb in range(microbatches):
        if stage > 0:
            recs.append(RECV(0, host, stage - 1, stage, mb, msg_bytes)); host += 1
        recs.append(K(0, host, fwd_ns, f"fwd{mb}")); host += 1
        if stage < stages - 1:
            recs.append(SEND(0, host, stage, stage + 1, mb, msg_bytes)); host += 1
    recs.append(SYNC(1, host))
    return recs


def test_four_stage_pipeline():
    # Worked out by hand (forward 10 ns, transfer 5 ns): see the table in docs/coordinator.md.
    expected = {
        0: [("fwd0", 0, 10), ("send", 10, 15), ("fwd1", 15, 25), ("send", 25, 35)],
        1: [("recv", 0, 15), ("fwd0", 15, 25), ("send", 25, 30), ("recv", 30, 35), ("fwd1", 35, 45), ("send", 45, 50)],
        2: [("recv", 0, 30), ("fwd0", 30, 40), ("send", 40, 45), ("recv", 45, 50), ("fwd1", 50, 60), ("send", 60, 65)],
        3: [("recv", 0, 45), ("fwd0", 45, 55), ("recv", 55, 65), ("fwd1", 65, 75)],
    }
    ends = {0: 35, 1: 50, 2: 65, 3: 75}
    programs = {s: pipeline_program(s, 4, 2, 10, 5) for s in range(4)}
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        c = Coordinator(4, FixedNetwork())
        got, queue = {}, [(stage, programs[stage]) for stage in order]
        while queue:  # a rank that got its reply is active again until it says it finished
            stage, batch = queue.pop(0)
            for rank, reply in c.submit(stage, batch):
                got[rank] = reply.host_ns
                queue.append((rank, [RankFinished(reply.host_ns)]))
        assert got == ends and c.done
        assert {s: times(c.spans(s)) for s in range(4)} == expected


def test_records_are_picklable_and_hashable():
    batch = [K(0, 1, 2), AR(0, 1, (0, 1), 0, 8), CoalescedRecord(0, 2, (SEND(0, 1, 0, 1, 0, 4),)),
             EventRecordRecord(1, 0, 2), StreamWaitRecord(1, 1, 2), SYNC(3, 4, "event", event=1),
             HostTimeRecord(5), RankFinished(6), SyncReply(3, 5, 4)]
    assert pickle.loads(pickle.dumps(batch)) == batch
    assert len(set(batch)) == len(batch)


# --- protocol errors ----------------------------------------------------------------------------------
def test_bad_input_is_rejected():
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [K(0, 10, 1)])
    with pytest.raises(ProtocolError, match="before the rank's clock"):
        c.submit(0, [K(0, 9, 1)])
    c.submit(0, [SYNC(1, 10)])
    with pytest.raises(ProtocolError, match="waiting for the reply"):
        Coordinator(2, FixedNetwork()).submit(0, [AR(0, 0, (0, 1), 0, 8), SYNC(1, 1), K(0, 2, 1)])
    c2 = Coordinator(2, FixedNetwork())
    c2.submit(0, [AR(0, 0, (0, 1), 0, 8)])
    with pytest.raises(CollectiveMismatchError, match="does not match rank 0"):
        c2.submit(1, [AR(0, 0, (0, 1), 0, 16)])
    with pytest.raises(CollectiveMismatchError, match="not a member"):
        Coordinator(3, FixedNetwork()).submit(2, [AR(0, 0, (0, 1), 0, 8)])
    with pytest.raises(CollectiveMismatchError, match="sender first"):
        Coordinator(2, FixedNetwork()).submit(1, [SEND(0, 0, 0, 1, 0, 8)])
    with pytest.raises(CollectiveMismatchError, match="root"):
        Coordinator(2, FixedNetwork()).submit(0, [CollectiveRecord(0, 0, (0, 1), 0, "broadcast", 8)])
    with pytest.raises(ProtocolError, match="before it starts"):
        Coordinator(1, FixedNetwork()).submit(0, [HostSleepRecord(10, 5)])


def test_a_sleep_advances_the_rank_and_is_kept_apart():
    """The program's own sleeps (HostSleepRecord): touching ones join; the rank's clock moves to the end; a later
    record may not go back into it."""
    c = Coordinator(1, FixedNetwork())
    c.submit(0, [K(0, 0, 10), HostSleepRecord(10, 20), HostSleepRecord(20, 30), HostSleepRecord(40, 40),
                 HostSleepRecord(50, 60)])
    assert c.host_sleeps(0) == [(10, 30), (50, 60)] and c.host_ns(0) == 60
    with pytest.raises(ProtocolError, match="before the rank's clock"):
        c.submit(0, [K(0, 55, 1)])


def test_an_uneven_all_to_all_takes_as_long_as_its_largest_member():
    """Note [Uneven all-to-alls]: members of an all-to-all with split sizes send different amounts."""
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [CollectiveRecord(0, 0, (0, 1), 0, "all_to_all", 100, None, "pg"), RankFinished(1)])
    c.submit(1, [CollectiveRecord(0, 0, (0, 1), 0, "all_to_all", 140, None, "pg"), RankFinished(1)])
    assert times(c.spans(0)) == times(c.spans(1)) == [("all_to_all", 0, 140)]
    c2 = Coordinator(2, FixedNetwork())
    c2.submit(0, [CollectiveRecord(0, 0, (0, 1), 0, "all_to_all", 100, None, "pg")])
    with pytest.raises(CollectiveMismatchError, match="does not match rank 0"):
        c2.submit(1, [AR(0, 0, (0, 1), 0, 100)])


def test_a_collective_a_member_never_issues_is_reported():
    c = Coordinator(2, FixedNetwork())
    c.submit(1, [RankFinished(0)])
    with pytest.raises(DeadlockError, match=r"never issued by rank\(s\) 1"):
        c.submit(0, [AR(0, 0, (0, 1), 0, 8), SYNC(1, 1)])


# --- safety with a real network ---------------------------------------------------------------------
def real_network() -> NetworkSimulator:
    return NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=4)))


def test_sync_reply_waits_for_a_late_rank_whose_transfer_shares_the_link():
    # Ranks 0 and 1 all_reduce 256 MiB; rank 2 sends 256 MiB into rank 1 from 10 us on, sharing rank 1's
    # NVSwitch port with the ring. Rank 2's batch arrives last: rank 0's reply must wait for it.
    ar = [AR(0, 0, (0, 1), 0, 256 * MiB)]
    batches = {
        0: ar + [SYNC(1, 1)],
        1: ar + [RECV(1, 5, 2, 1, 0, 256 * MiB), HostTimeRecord(10**9), RankFinished(10**9)],
        2: [K(0, 0, 10_000), SEND(0, 10_000, 2, 1, 0, 256 * MiB), RankFinished(10_001)],
        3: [RankFinished(0)],
    }
    late = Coordinator(4, real_network())
    assert late.submit(0, batches[0]) == []
    assert late.submit(1, batches[1]) == []
    assert late.submit(3, batches[3]) == []  # rank 2 is active at host time 0: nothing is safe yet
    assert late.network.now_ns == 0
    [(rank, reply)] = late.submit(2, batches[2])

    early = Coordinator(4, real_network())
    got = replies_of(*(early.submit(r, batches[r]) for r in (2, 3, 1, 0)))
    assert (rank, reply) == (0, got[0][0])

    # Without rank 2's transfer the all_reduce ends earlier: a reply released before rank 2 reported
    # would have been wrong.
    alone = Coordinator(4, real_network())
    alone.submit(1, ar + [RankFinished(1)])
    alone.submit(2, [RankFinished(0)])
    alone.submit(3, [RankFinished(0)])
    [(_, alone_reply)] = alone.submit(0, batches[0])
    assert alone_reply.host_ns < reply.host_ns
    assert alone_reply.host_ns == alone.collectives()[0].end_ns
    assert reply.host_ns == late.collectives()[0].end_ns


def test_finished_ranks_impose_no_bound_but_active_ones_do():
    c = Coordinator(3, real_network())
    c.submit(0, [AR(0, 0, (0, 1), 0, MiB), SYNC(1, 1)])
    assert c.submit(1, [AR(0, 0, (0, 1), 0, MiB), RankFinished(1)]) == []  # rank 2 could still start at 0
    assert c.submit(2, [HostTimeRecord(5)]) == []  # still below the all_reduce's end
    [(rank, reply)] = c.submit(2, [HostTimeRecord(10**9)])
    assert rank == 0 and reply.host_ns == c.collectives()[0].end_ns


# --- determinism under every interleaving ----------------------------------------------------------
@dataclass
class ScriptedRank:
    """A rank program of abstract steps; host times follow from per-step costs and the replies."""

    rank: int
    steps: list
    host_ns: int = 0
    pos: int = 0
    waiting: bool = False
    finished: bool = False
    replies: list = field(default_factory=list)

    def next_batch(self, limit: int) -> list:
        batch = []
        while len(batch) < limit and not self.waiting and not self.finished:
            if self.pos == len(self.steps):
                batch.append(RankFinished(self.host_ns))
                self.finished = True
                break
            cost, make = self.steps[self.pos]
            self.pos += 1
            self.host_ns += cost
            record = make(self.host_ns)
            batch.append(record)
            self.waiting = isinstance(record, SyncRequest)
        return batch

    def deliver(self, reply: SyncReply) -> None:
        assert self.waiting
        self.host_ns = reply.host_ns
        self.waiting = False
        self.replies.append(reply)


OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "reduce", "barrier"]


def make_programs(seed: int, n: int) -> list[list]:
    """Random per-rank programs whose collectives follow one global order (so they cannot deadlock)."""
    rng = random.Random(seed)
    half = n // 2
    groups = {"world": tuple(range(n)), "even": tuple(range(0, n, 2)), "odd": tuple(range(1, n, 2)),
              "lo": tuple(rng.sample(range(half), half)), "hi": tuple(range(half, n))}
    seqs: dict = {}
    progs: list[list] = [[] for _ in range(n)]
    events = [0] * n

    def nxt(key):
        seqs[key] = seqs.get(key, -1) + 1
        return seqs[key]

    def local(r):
        kind = rng.random()
        cost = rng.randrange(0, 3000)
        stream = rng.randrange(3)
        if kind < 0.45:
            dur = rng.randrange(0, 200_000)
            cls = "gemm" if stream == 0 else "elementwise"  # GEMMs are slowed by held SMs, elementwise kernels not
            progs[r].append((cost, lambda h, s=stream, d=dur, c=cls: KernelRecord(s, h, d, "k", 1.0, 2.0, c)))
        elif kind < 0.6:
            events[r] += 1
            progs[r].append((cost, lambda h, e=events[r], s=stream: EventRecordRecord(e, s, h)))
        elif kind < 0.72 and events[r]:
            e = rng.randint(1, events[r])
            progs[r].append((cost, lambda h, e=e, s=stream: StreamWaitRecord(s, e, h)))
        elif kind < 0.82:
            sync = rng.choice(["device", "stream", "event"])
            rid = len(progs[r])
            if sync == "event":
                e = rng.randint(0, events[r])  # 0: never recorded
                progs[r].append((cost, lambda h, i=rid, e=e: SyncRequest(i, h, "event", None, e)))
            else:
                progs[r].append((cost, lambda h, i=rid, k=sync, s=stream: SyncRequest(i, h, k, s if k == "stream" else None)))
        else:
            progs[r].append((rng.randrange(0, 100_000), lambda h: HostTimeRecord(h)))

    for _ in range(40):
        roll = rng.random()
        size = rng.choice([4096, 64 * 1024, MiB, 16 * MiB, 64 * MiB])
        if roll < 0.25:
            src, dst = rng.sample(range(n), 2)
            seq = nxt(("p2p", src, dst))
            for r, op in ((src, "send"), (dst, "recv")):
                s = rng.randrange(3)
                progs[r].append((rng.randrange(0, 2000), lambda h, s=s, op=op, src=src, dst=dst, seq=seq, size=size:
                                 CollectiveRecord(s, h, (src, dst), seq, op, size, None, "p2p")))
        elif roll < 0.35:
            a, b = rng.sample(range(n), 2)
            sab, sba = nxt(("p2p", a, b)), nxt(("p2p", b, a))
            for me, peer, s_out, s_in in ((a, b, sab, sba), (b, a, sba, sab)):
                st = rng.randrange(3)
                progs[me].append((rng.randrange(0, 2000), lambda h, st=st, me=me, peer=peer, so=s_out, si=s_in, size=size:
                                  CoalescedRecord(st, h, (CollectiveRecord(st, h, (me, peer), so, "send", size, None, "p2p"),
                                                          CollectiveRecord(st, h, (peer, me), si, "recv", size, None, "p2p")))))
        else:
            tag = rng.choice(sorted(groups))
            group = groups[tag]
            op = rng.choice(OPS)
            root = rng.choice(group) if op in ("broadcast", "reduce") else None
            seq = nxt(tag)
            for r in group:
                s = rng.randrange(3)
                progs[r].append((rng.randrange(0, 2000), lambda h, s=s, g=group, q=seq, op=op, size=size, root=root, tag=tag:
                                 CollectiveRecord(s, h, g, q, op, size, root, tag)))
        for r in range(n):
            for _ in range(rng.randrange(3)):
                local(r)
    for r in range(n):
        progs[r].append((10, lambda h: SyncRequest(10**6, h, "device")))
    return progs


def simulate(programs: list[list], n: int, seed: int | None, gpus_per_node: int = 4,
             sharing: GpuSharing = NO_SHARING, period: int | None = None):
    """Run the programs through a coordinator; seed None: each rank's whole program in one go, in rank order.
    `period`: only ranks 0..period-1 run, the others are their mirrors (Note [Representative ranks])."""
    rng = random.Random(seed)
    processes = period or n
    favourite = rng.randrange(processes)  # some interleavings let one rank run far ahead of the others
    bias = rng.choice([0.0, 0.8])
    symmetry = RankSymmetry(n, (Axis(period, n // period),)) if period else None
    net = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=n // gpus_per_node, gpus_per_node=gpus_per_node)),
                           sharing=sharing, compute_of=symmetry.representative if symmetry else None)
    c = Coordinator(n, net, launch_latency_ns=1_000, sharing=sharing, symmetry=symmetry)
    n = processes
    ranks = [ScriptedRank(r, programs[r]) for r in range(n)]
    while not all(r.finished for r in ranks):
        ready = [r for r in ranks if not r.waiting and not r.finished]
        assert ready, "every rank waits, yet the coordinator released nothing"
        if seed is None:
            rk, limit = ready[0], 10**9
        else:
            preferred = [r for r in ready if r.rank == favourite]
            rk = preferred[0] if preferred and rng.random() < bias else rng.choice(ready)
            limit = rng.choice([1, 1, 2, 3, 5, 8])
        for rank, reply in c.submit(rk.rank, rk.next_batch(limit)):
            ranks[rank].deliver(reply)
    assert c.done
    return ([r.replies for r in ranks], [c.spans(r) for r in range(n)], c.collectives(),
            [c.host_ns(r) for r in range(n)])


@pytest.mark.parametrize("program_seed,n", [(1, 4), (2, 8), (3, 8)])
def test_identical_results_for_any_interleaving(program_seed, n):
    programs = make_programs(program_seed, n)
    reference = simulate(programs, n, None)
    replies, spans, colls, _ = reference
    assert sum(len(r) for r in replies) > n and len(colls) >= 30  # the programs do sync and communicate
    assert any(s.collectives and s.start_ns < s.collectives[0].start_ns for per_rank in spans for s in per_rank)
    for seed in range(8):
        assert simulate(programs, n, 1000 * program_seed + seed) == reference


@pytest.mark.parametrize("program_seed,n", [(4, 4), (5, 8)])
def test_identical_results_for_any_interleaving_with_compute_beside_nccl(program_seed, n):
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0, nccl_channels=24, sm_count=132)
    programs = make_programs(program_seed, n)
    reference = simulate(programs, n, None, sharing=sharing)
    assert reference != simulate(programs, n, None)  # the slowdowns change the schedule
    assert reference != simulate(programs, n, None, sharing=GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0))  # held SMs too
    for seed in range(6):
        assert simulate(programs, n, 1000 * program_seed + seed, sharing=sharing) == reference


# --- representative ranks (protocol/symmetry.py Note [Representative ranks]) ----------------------
def axis_group(rank: int, axis: Axis) -> tuple[int, ...]:
    """The members of `rank`'s group along a mesh axis."""
    return tuple(axis.shift(rank, k - axis.coordinate(rank)) for k in range(axis.size))


def make_symmetric_programs(seed: int, n: int, mesh: dict[str, Axis]) -> list[list]:
    """One random program, run by every rank on its own groups: the world and its group along each mesh axis."""
    rng = random.Random(seed)
    steps: list[tuple] = []
    for _ in range(60):
        roll = rng.random()
        if roll < 0.45:
            steps.append(("kernel", rng.randrange(0, 3000), rng.randrange(3), rng.randrange(0, 200_000)))
        elif roll < 0.55:
            steps.append(("sync", rng.randrange(0, 3000), rng.choice(["device", "stream"]), rng.randrange(3)))
        else:
            steps.append(("collective", rng.randrange(0, 2000), rng.randrange(3), rng.choice(["world", *mesh]),
                          rng.choice(OPS), rng.choice([4096, MiB, 16 * MiB, 64 * MiB])))
    programs = []
    for r in range(n):
        mine = {"world": tuple(range(n)), **{name: axis_group(r, axis) for name, axis in mesh.items()}}
        seqs, prog = {}, []
        for i, step in enumerate(steps):
            if step[0] == "kernel":
                _, cost, stream, dur = step
                prog.append((cost, lambda h, s=stream, d=dur: KernelRecord(s, h, d, "k", 1.0, 2.0)))
            elif step[0] == "sync":
                _, cost, kind, stream = step
                prog.append((cost, lambda h, i=i, k=kind, s=stream: SyncRequest(i, h, k, s if k == "stream" else None)))
            else:
                _, cost, stream, which, op, size = step
                group = mine[which]
                tag = f"{which}{min(group)}"
                seqs[tag] = seq = seqs.get(tag, -1) + 1
                root = group[0] if op in ("broadcast", "reduce") else None
                prog.append((cost, lambda h, s=stream, g=group, q=seq, op=op, size=size, root=root, tag=tag:
                             CollectiveRecord(s, h, g, q, op, size, root, tag)))
        prog.append((10, lambda h: SyncRequest(10**6, h, "device")))
        programs.append(prog)
    return programs


def simulate_folded(programs: list[list], n: int, gpus_per_node: int, symmetry: RankSymmetry | None,
                    sharing: GpuSharing, seed: int | None = None):
    """`simulate` of the representatives only (every rank without a symmetry), by rank."""
    rng = random.Random(seed)
    net = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=n // gpus_per_node, gpus_per_node=gpus_per_node)),
                           sharing=sharing, compute_of=symmetry.representative if symmetry else None)
    c = Coordinator(n, net, launch_latency_ns=1_000, sharing=sharing, symmetry=symmetry)
    ranks = {r: ScriptedRank(r, programs[r]) for r in c.representatives}
    while not all(r.finished for r in ranks.values()):
        ready = [r for r in ranks.values() if not r.waiting and not r.finished]
        assert ready, "every rank waits, yet the coordinator released nothing"
        rk = ready[0] if seed is None else rng.choice(ready)
        for rank, reply in c.submit(rk.rank, rk.next_batch(10**9 if seed is None else rng.choice([1, 2, 5]))):
            ranks[rank].deliver(reply)
    assert c.done
    return ({r: ranks[r].replies for r in ranks}, {r: c.spans(r) for r in ranks}, c.collectives(),
            {r: c.host_ns(r) for r in ranks})


MESHES = {  # name: (world, GPUs per node, mesh axes, folded axes)
    "tp x dp, dp folded": (16, 4, {"tp": Axis(1, 8), "dp": Axis(8, 2)}, ("dp",)),
    "tp x dp on 4 nodes": (32, 4, {"tp": Axis(1, 8), "dp": Axis(8, 4)}, ("dp",)),
    "tp x dp in one node, both folded": (16, 16, {"tp": Axis(1, 2), "dp": Axis(2, 8)}, ("tp", "dp")),
    "pp x dp x tp, dp folded": (16, 2, {"tp": Axis(1, 2), "dp": Axis(2, 4), "pp": Axis(8, 2)}, ("dp",)),
}


@pytest.mark.parametrize("name", sorted(MESHES))
def test_representative_ranks_give_the_answer_of_every_rank(name):
    """With the mirrors' copies of local groups on the network and their compute taken from their
    representatives', the representatives' replies, spans and collectives are those of every rank's run."""
    n, gpus_per_node, mesh, folded = MESHES[name]
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0)
    programs = make_symmetric_programs(sum(map(ord, name)), n, mesh)
    symmetry = RankSymmetry(n, tuple(mesh[a] for a in folded))
    replies, spans, colls, hosts = simulate_folded(programs, n, gpus_per_node, None, sharing)
    m_replies, m_spans, m_colls, m_hosts = simulate_folded(programs, n, gpus_per_node, symmetry, sharing)
    reps = symmetry.representatives
    assert len(reps) == n // symmetry.copies < n
    assert m_replies == {r: replies[r] for r in reps} and m_hosts == {r: hosts[r] for r in reps}
    assert m_spans == {r: spans[r] for r in reps}
    assert m_colls == [c for c in colls if any(symmetry.is_representative(g) for g in c.group)]
    assert len(colls) > len(m_colls) > 10  # the mirrors' own groups were simulated, as copies
    for seed in range(2):  # and any interleaving of the representatives gives it too
        assert simulate_folded(programs, n, gpus_per_node, symmetry, sharing, seed)[:2] == (m_replies, m_spans)


def test_a_local_group_is_copied_onto_the_mirrors_and_an_invariant_group_waits_for_its_representatives_only():
    symmetry = RankSymmetry(8, (Axis(2, 4),))

    class Recording(FixedNetwork):
        compute_of = symmetry.representative

        def __init__(self) -> None:
            super().__init__()
            self.groups: list[tuple[int, ...]] = []

        def submit(self, req: CollectiveRequest) -> None:
            self.groups.append(req.group)
            super().submit(req)

    net = Recording()
    c = Coordinator(8, net, symmetry=symmetry)
    c.submit(1, [AR(0, 0, (0, 1), 0, 1000), AR(0, 0, (1, 3, 5, 7), 0, 500, tag="dp1"), SYNC(1, 0)])
    replies = c.submit(0, [AR(0, 100, (0, 1), 0, 1000), AR(0, 100, (0, 2, 4, 6), 0, 500, tag="dp0"), SYNC(1, 100)])
    assert net.groups[:4] == [(0, 1), (2, 3), (4, 5), (6, 7)]  # the block's copies start with it
    assert sorted(net.groups[4:]) == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert [r.ready_ns for _, r in replies] == [1600, 1600]
    assert [(c_.group, c_.member_start_ns) for c_ in c.collectives()][:1] == [((0, 1), (100, 0))]
    assert c.collectives()[1].member_start_ns == (1100,) * 4  # the mirrors reached it with rank 0


def test_a_group_that_breaks_the_symmetry_or_a_transfer_to_a_mirror_is_refused():
    symmetry = RankSymmetry(8, (Axis(2, 4),))

    def coordinator() -> Coordinator:
        net = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=8)),
                               compute_of=symmetry.representative)
        return Coordinator(8, net, symmetry=symmetry)

    with pytest.raises(ProtocolError, match="does not fit"):
        coordinator().submit(0, [AR(0, 0, (0, 1, 2), 0, 1000)])
    with pytest.raises(ProtocolError, match="does not fit"):
        coordinator().submit(0, [SEND(0, 0, 0, 2, 0, 1000)])
    with pytest.raises(ProtocolError, match="not one of the 2 ranks that run"):
        coordinator().submit(2, [K(0, 0, 10)])
    with pytest.raises(ValueError, match="compute_of"):
        Coordinator(8, FixedNetwork(), symmetry=symmetry)


# --- compute beside NCCL (Note [Compute beside NCCL]) ---------------------------------------------
class BusyRecordingNetwork(FixedNetwork):
    """FixedNetwork that also records the compute periods the coordinator reports."""

    sharing = GpuSharing(nccl_slowdown=2.0)

    def __init__(self) -> None:
        super().__init__()
        self.compute: list[tuple[int, int, int]] = []

    def mark_compute(self, gpu: int, start_ns: int, end_ns: int) -> None:
        assert start_ns == self.now_ns
        self.compute.append((gpu, start_ns, end_ns))


def test_kernels_that_start_while_nccl_is_in_flight_are_slowed():
    net = BusyRecordingNetwork()
    c = Coordinator(2, net, sharing=GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0))
    c.submit(1, [AR(1, 0, (0, 1), 0, 1000), RankFinished(0)])  # on the network from 0 to 1000
    c.submit(0, [AR(1, 0, (0, 1), 0, 1000), K(0, 0, 100, "same_start"), K(0, 500, 100, "during"),
                 K(0, 2000, 100, "after"), SYNC(1, 2000)])
    assert times(c.spans(0, 0)) == [("same_start", 0, 100), ("during", 500, 650), ("after", 2000, 2100)]
    assert net.compute == [(0, 0, 100), (0, 500, 650), (0, 2000, 2100)]


def test_gemms_are_slowed_by_the_sms_an_nccl_kernel_holds_while_it_waits_for_a_late_peer():
    """Note [Compute beside NCCL]: rank 0's all-reduce holds 24 of 132 SMs from 0, while rank 1 arrives only at
    10_000; a GEMM then runs on 108 SMs, an elementwise kernel (memory-bound) at its speed, and once the
    operation is on the network every kernel takes `compute_slowdown`."""
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0, nccl_channels=24, sm_count=132)
    c = Coordinator(2, BusyRecordingNetwork(), sharing=sharing)
    size = 1 << 20  # large enough for all 24 channels; FixedNetwork: on the network from 10_000 for `size` ns
    c.submit(1, [AR(1, 10_000, (0, 1), 0, size), RankFinished(10_000)])
    gemm = lambda host, name: KernelRecord(0, host, 1000, name, kernel_class="gemm")
    c.submit(0, [AR(1, 0, (0, 1), 0, size), gemm(100, "waiting"),
                 KernelRecord(0, 2000, 1000, "elementwise", kernel_class="elementwise"),
                 gemm(20_000, "on_network"), gemm(2_000_000, "after"), SYNC(1, 2_000_000)])
    assert times(c.spans(0, 0)) == [("waiting", 100, 1322), ("elementwise", 2000, 3000),
                                    ("on_network", 20_000, 21_500), ("after", 2_000_000, 2_001_000)]


def test_a_small_nccl_operation_holds_fewer_sms():
    sharing = GpuSharing(nccl_channels=24, sm_count=132)
    assert sharing.held_sm_factor("all_gather", 1 << 30) == pytest.approx(132 / 108)
    assert sharing.held_sm_factor("all_reduce", 8192) == pytest.approx(132 / 131)  # NCCL runs it on one channel
    assert sharing.held_sm_factor("send_recv", 1 << 30) == 1.0  # no point-to-point channels given
    assert GpuSharing().held_sm_factor("all_gather", 1 << 30) == 1.0
    with pytest.raises(ValueError, match="below sm_count"):
        GpuSharing(nccl_channels=132, sm_count=132)


def test_a_send_recv_holds_its_peers_point_to_point_channels():
    """A pipeline stage's send/recv waits for its peer on NCCL's channels per peer (16 blocks on an H200), fewer
    for a transfer of fewer chunks; an all-to-all, whose channels follow its split sizes, holds none."""
    sharing = GpuSharing(nccl_channels=24, p2p_channels_per_peer=16, sm_count=132)
    assert sharing.held_sm_factor("send_recv", 64 << 20) == pytest.approx(132 / 116)
    assert sharing.held_sm_factor("send_recv", 1 << 20) == pytest.approx(132 / 130)  # two 512 KiB chunks
    assert sharing.held_sm_factor("all_to_all", 64 << 20) == 1.0
    with pytest.raises(ValueError, match="p2p_channels_per_peer must be"):
        GpuSharing(p2p_channels_per_peer=132, sm_count=132)


def test_a_kernel_beside_an_operation_with_its_own_factor_is_slowed_by_that_factor():
    class Network(BusyRecordingNetwork):
        sharing = GpuSharing(nccl_slowdown=2.0, by_op=(("all_reduce", 1.0, 2.0),))

    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0, by_op=(("all_reduce", 1.2, 2.0),))
    c = Coordinator(2, Network(), sharing=sharing)
    c.submit(1, [AR(1, 0, (0, 1), 0, 1000), RankFinished(0)])
    c.submit(0, [AR(1, 0, (0, 1), 0, 1000), K(0, 500, 100, "during"), SYNC(1, 2000)])
    assert times(c.spans(0, 0)) == [("during", 500, 620)]
    with pytest.raises(ValueError, match="busy_slowdown"):  # the network must slow all_reduce alike
        Coordinator(2, BusyRecordingNetwork(), sharing=sharing)


def test_kernels_of_one_gpu_run_one_at_a_time_and_a_waiting_side_stream_kernel_goes_first():
    """Note [One kernel at a time]: the side stream's kernel, ready at 50 while the main stream's first
    kernel runs, takes the GPU at 100, before the main stream's next kernel (launched earlier, ready only at 100)."""
    net = BusyRecordingNetwork()
    c = Coordinator(1, net, sharing=GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0))
    c.submit(0, [K(0, 0, 100, "main1"), K(0, 10, 100, "main2"), K(2, 50, 30, "side"), K(0, 60, 100, "main3"),
                 SYNC(1, 60)])
    assert times(c.spans(0, 0)) == [("main1", 0, 100), ("main2", 130, 230), ("main3", 230, 330)]
    assert times(c.spans(0, 2)) == [("side", 100, 130)]


def test_back_to_back_kernels_are_a_kernel_gap_apart_and_a_kernel_on_an_idle_gpu_starts_when_ready():
    net = BusyRecordingNetwork()
    c = Coordinator(1, net, sharing=GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0, kernel_gap_ns=5))
    c.submit(0, [K(0, 0, 100, "first"), K(0, 10, 100, "queued"), K(2, 20, 30, "side"), K(0, 1000, 100, "later"),
                 SYNC(1, 1000)])
    assert times(c.spans(0, 2)) == [("side", 105, 135)]
    assert times(c.spans(0, 0)) == [("first", 0, 100), ("queued", 140, 240), ("later", 1000, 1100)]


def test_kernel_gap_must_not_be_negative():
    with pytest.raises(ValueError):
        GpuSharing(kernel_gap_ns=-1)


def test_host_device_copies_run_beside_kernels():
    net = BusyRecordingNetwork()
    c = Coordinator(1, net, sharing=GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0))
    c.submit(0, [K(0, 0, 100, "main"), KernelRecord(2, 10, 50, "h2d", kernel_class="memcpy"), SYNC(1, 10)])
    assert times(c.spans(0, 2)) == [("h2d", 10, 60)]


def test_sharing_needs_the_network_to_slow_nccl_by_the_same_factor():
    with pytest.raises(ValueError):
        Coordinator(2, BusyRecordingNetwork(), sharing=GpuSharing(compute_slowdown=1.5, nccl_slowdown=3.0))


# --- queries (Note [Queries]) ---------------------------------------------------------------------
def test_query_of_finished_work_is_done_and_does_not_move_the_host():
    c = Coordinator(1, FixedNetwork())
    [(rank, reply)] = c.submit(0, [K(0, 0, 10), SyncRequest(1, 50, "stream", stream_id=0, query=True)])
    assert (rank, reply) == (0, SyncReply(1, 50, 10))
    c.submit(0, [K(0, 50, 5), RankFinished(60)])  # the host goes on from 50, not from any wait
    assert c.host_blocked_ns(0) == 0 and c.done


def test_query_of_running_work_is_not_done():
    c = Coordinator(1, FixedNetwork())
    [(_, reply)] = c.submit(0, [K(0, 0, 100), SyncRequest(1, 20, "stream", stream_id=0, query=True)])
    assert reply.ready_ns == -1 and reply.host_ns == 20


def test_query_behind_an_unmatched_collective_is_answered_once_the_network_reaches_the_host_time():
    c = Coordinator(2, FixedNetwork())
    # rank 0 queries a stream stuck behind an all-reduce rank 1 has not issued yet
    assert c.submit(0, [AR(0, 0, (0, 1), 0, 100), SyncRequest(1, 40, "stream", stream_id=0, query=True)]) == []
    # rank 1 is still at host time 10: the answer is not known yet (it could still start the call at 10)
    assert c.submit(1, [HostTimeRecord(10)]) == []
    # once rank 1 is past 40 without having issued it, the call cannot end by 40: not done
    assert c.submit(1, [HostTimeRecord(45)]) == [(0, SyncReply(1, 40, -1))]


# --- power cap (Note [Power cap]) -----------------------------------------------------------------
def test_gemms_slow_down_once_their_power_exceeds_the_cap_and_other_kernels_keep_their_time():
    """A GEMM of 1 ms demanding 600 W over a 200 W idle (cap 500 W) runs back to back: once the one-second
    average passes the 300 W left, GEMMs run longer; an elementwise kernel after them does not."""
    cap = PowerCap(cap_w=500.0, idle_w=200.0, pj_per_tensor_flop=1.0, pj_per_byte=0.0, window_s=0.05)
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0)
    c = Coordinator(1, BusyRecordingNetwork(), sharing=sharing, power=cap)
    gemm = [KernelRecord(0, 0, 1_000_000, f"g{i}", flops=0.6e12, kernel_class="gemm") for i in range(300)]
    c.submit(0, gemm + [KernelRecord(0, 0, 1_000_000, "add", bytes=1e9, kernel_class="elementwise"), SYNC(1, 0)])
    spans = c.spans(0, 0)
    durations = [s.end_ns - s.start_ns for s in spans]
    assert durations[0] == 1_000_000
    assert durations[-2] == pytest.approx(2_000_000, rel=0.03)  # steady state: 600 W demanded / 300 W left
    assert durations[-1] == 1_000_000
    power = c.power(0)
    assert power.average_w() == pytest.approx(200.0 + 600.0, rel=0.05)
    assert power.clocked_ns == 300 * 1_000_000 and power.slowed_ns == sum(durations[:-1]) - power.clocked_ns


def test_a_power_cap_needs_the_sharing_model():
    with pytest.raises(ValueError, match="sharing"):
        Coordinator(1, FixedNetwork(), power=PowerCap(cap_w=500.0, idle_w=200.0, pj_per_tensor_flop=1.0, pj_per_byte=0.0))


# --- the slowest chip's pace (Note [The slowest chip's pace]) -------------------------------------------
@pytest.mark.parametrize("shared", [False, True])
def test_gemms_and_attention_run_at_the_slowest_chips_pace_and_other_kernels_keep_their_time(shared):
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0) if shared else NO_SHARING
    c = Coordinator(2, BusyRecordingNetwork() if shared else FixedNetwork(), sharing=sharing, clock_factor=1.02)
    records = [KernelRecord(0, 0, 1_000_000, "gemm", kernel_class="gemm"),
               KernelRecord(0, 0, 500_000, "flash", kernel_class="attention"),
               KernelRecord(0, 0, 1_000_000, "add", kernel_class="elementwise"), SYNC(1, 0)]
    for rank in (0, 1):
        c.submit(rank, records)
    for rank in (0, 1):
        assert [s.end_ns - s.start_ns for s in c.spans(rank, 0)] == [1_020_000, 510_000, 1_000_000]


def test_a_clock_factor_below_one_is_refused():
    with pytest.raises(ValueError, match="clock_factor"):
        Coordinator(2, FixedNetwork(), clock_factor=0.99)


def test_the_slowest_chips_pace_holds_under_the_power_cap():
    """At the cap a chip slower than the mean one draws the same power at a lower clock: it spends more energy per
    GEMM, so the cap does not take its extra time back (as its faster kernels would leave the average lower)."""
    cap = PowerCap(cap_w=500.0, idle_w=200.0, pj_per_tensor_flop=1.0, pj_per_byte=0.0, window_s=0.05)
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0)
    steady = []
    for factor in (1.0, 1.05):
        c = Coordinator(1, BusyRecordingNetwork(), sharing=sharing, power=cap, clock_factor=factor)
        gemm = [KernelRecord(0, 0, 1_000_000, f"g{i}", flops=0.6e12, kernel_class="gemm") for i in range(300)]
        c.submit(0, gemm + [SYNC(1, 0)])
        last = c.spans(0, 0)[-100:]
        steady.append(sum(sp.end_ns - sp.start_ns for sp in last) / len(last))
    assert steady[0] == pytest.approx(2_000_000, rel=0.03)
    assert steady[1] == pytest.approx(1.05 * steady[0], rel=0.01)
