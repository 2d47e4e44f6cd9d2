"""Frames: every message survives the round trip, frames reassemble from any chunking, foreign pickles are refused."""

import pickle
from collections import OrderedDict

import pytest

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
from phantora.transport.wire import (
    HEADER,
    Failure,
    FrameReader,
    Hello,
    Welcome,
    WireError,
    decode,
    encode,
    parse_address,
)

BATCH = [
    KernelRecord(1 << 32 | 7, 10, 20, "gemm", 1.5e9, 2.0e6, "gemm", "bf16[8, 8]"),
    CollectiveRecord(0, 11, (0, 3), 4, "all_reduce", 1 << 20, None, "pg0"),
    CoalescedRecord(0, 12, (CollectiveRecord(0, 12, (0, 1), 0, "send", 64, None, "p2p"),
                            CollectiveRecord(0, 12, (1, 0), 0, "recv", 64, None, "p2p"))),
    EventRecordRecord(5, 0, 13),
    StreamWaitRecord(1, 5, 14),
    HostTimeRecord(15),
    HostSleepRecord(15, 2_000_000_015),
    SyncRequest(1, 16, "event", None, 5),
]


def test_every_message_round_trips():
    for message in [BATCH, [RankFinished(99)], SyncReply(1, 20, 18), Hello(3, 1234, "tok"), Welcome(8),
                    Failure("boom")]:
        frame = encode(message)
        assert HEADER.unpack(frame[:4])[0] == len(frame) - 4
        assert decode(frame[4:]) == message
    # the fast reducer writes frames any unpickler reads
    assert pickle.loads(encode(BATCH)[4:]) == BATCH


def test_frames_reassemble_from_any_chunking():
    stream = b"".join(encode(m) for m in (BATCH, SyncReply(1, 2, 3), [RankFinished(5)]))
    reader = FrameReader()
    got = []
    for i in range(len(stream)):
        got += reader.feed(stream[i:i + 1])
    assert got == [BATCH, SyncReply(1, 2, 3), [RankFinished(5)]] and reader.pending_bytes == 0
    assert FrameReader().feed(stream) == got


def test_foreign_pickles_and_corrupt_frames_are_refused():
    with pytest.raises(WireError, match="collections.OrderedDict"):
        decode(pickle.dumps(OrderedDict()))
    with pytest.raises(WireError, match="undecodable"):
        decode(b"\x80\x05garbage")
    with pytest.raises(WireError, match="over the limit"):
        FrameReader().feed(HEADER.pack(2**31) + b"x")


def test_parse_address():
    assert parse_address("127.0.0.1:4000") == ("127.0.0.1", 4000)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("localhost", ":80", "h:0", "h:x", "h:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_address(bad)
