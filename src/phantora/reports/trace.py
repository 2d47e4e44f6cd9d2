"""One Chrome/Perfetto trace (`trace.json`) of the whole simulated job, from the coordinator's state.

Layout (open in ui.perfetto.dev or chrome://tracing): a process per rank ("rank N"); in it, a
"host" track with the times the host blocked on a synchronization or the program slept
(`time.sleep`), then a track per CUDA stream
("cuda:D stream S", from `protocol.records.decode_stream`). Kernels carry their cost-model class
as category and flops, bytes, shapes and launch time as args; an NCCL call carries, per operation,
op, size, communicator, algorithm and protocol, and when this rank's stream reached it (member
start) vs when the operation started on the network (the last member's arrival); the wait in
between is a nested "waiting for peers" slice.

Chrome JSON trace format: "X" (complete) events with `ts`/`dur` in microseconds (fractions keep
nanoseconds), "M" metadata events naming processes and threads; pid and tid are integers.
Events are written one by one, so a trace of millions of kernels never sits in memory as a list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from phantora.engine.coordinator import HostWait, Span
from phantora.protocol.records import decode_stream
from phantora.reports.breakdown import CoordinatorState, is_nccl, network_start_ns

HOST_TID = 0
_SYNC_NAMES = {"device": "cudaDeviceSynchronize", "stream": "cudaStreamSynchronize",
               "event": "cudaEventSynchronize"}


def _us(ns: int) -> float:
    return ns / 1000


def _meta(name: str, pid: int, tid: int | None, args: dict) -> dict:
    event = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _kernel_event(span: Span, pid: int, tid: int) -> dict:
    args: dict = {"flops": span.flops, "bytes": span.bytes, "launch_us": _us(span.host_ns),
                  "queued_us": _us(span.start_ns - span.host_ns)}
    if span.detail:
        args["shapes"] = span.detail
    return {"name": span.name, "cat": span.kernel_class or "kernel", "ph": "X", "pid": pid, "tid": tid,
            "ts": _us(span.start_ns), "dur": _us(span.end_ns - span.start_ns), "args": args}


def _nccl_events(span: Span, pid: int, tid: int) -> list[dict]:
    ops = [{"op": c.op, "size_bytes": c.size_bytes, "group": list(c.group), "tag": c.tag, "seq": c.seq,
            "root": c.root, "algorithm": c.algorithm, "protocol": c.protocol,
            "network_start_us": _us(c.start_ns), "network_end_us": _us(c.end_ns),
            "member_start_us": _us(span.start_ns), "wait_for_peers_us": _us(c.start_ns - span.start_ns)}
           for c in span.collectives]
    args: dict = dict(ops[0]) if len(ops) == 1 else {"ops": ops}
    args["launch_us"] = _us(span.host_ns)
    events = [{"name": span.name, "cat": "nccl", "ph": "X", "pid": pid, "tid": tid, "ts": _us(span.start_ns),
               "dur": _us(span.end_ns - span.start_ns), "args": args}]
    wait_end = network_start_ns(span)
    if wait_end > span.start_ns:  # nested inside the call: the part spent spinning for late peers
        events.append({"name": "waiting for peers", "cat": "nccl_wait", "ph": "X", "pid": pid, "tid": tid,
                       "ts": _us(span.start_ns), "dur": _us(wait_end - span.start_ns)})
    return events


def _host_event(wait: HostWait, pid: int) -> dict:
    return {"name": _SYNC_NAMES.get(wait.kind, f"sync {wait.kind}"), "cat": "host_blocked", "ph": "X", "pid": pid,
            "tid": HOST_TID, "ts": _us(wait.from_ns), "dur": _us(wait.until_ns - wait.from_ns),
            "args": {"request_id": wait.request_id}}


def rank_events(state: CoordinatorState, rank: int) -> Iterator[dict]:
    """Every trace event of one rank (pid = rank)."""
    yield _meta("process_name", rank, None, {"name": f"rank {rank}"})
    yield _meta("process_sort_index", rank, None, {"sort_index": rank})
    yield _meta("thread_name", rank, HOST_TID, {"name": "host"})
    yield _meta("thread_sort_index", rank, HOST_TID, {"sort_index": -1})
    for wait in state.host_waits(rank):
        if wait.until_ns > wait.from_ns:
            yield _host_event(wait, rank)
    for start_ns, end_ns in state.host_sleeps(rank):
        yield {"name": "time.sleep", "cat": "host_sleep", "ph": "X", "pid": rank, "tid": HOST_TID,
               "ts": _us(start_ns), "dur": _us(end_ns - start_ns)}
    for index, stream_id in enumerate(state.stream_ids(rank), start=1):
        device, stream = decode_stream(stream_id)
        yield _meta("thread_name", rank, index, {"name": f"cuda:{device} stream {stream}"})
        yield _meta("thread_sort_index", rank, index, {"sort_index": index})
        for span in state.spans(rank, stream_id):
            if is_nccl(span):
                yield from _nccl_events(span, rank, index)
            else:
                yield _kernel_event(span, rank, index)


def trace_events(state: CoordinatorState) -> Iterator[dict]:
    for rank in state.representatives:
        yield from rank_events(state, rank)


def write_chrome_trace(path: Path, state: CoordinatorState) -> None:
    with open(path, "w") as f:
        f.write('{"displayTimeUnit": "ms", "traceEvents": [\n')
        first = True
        for event in trace_events(state):
            if not first:
                f.write(",\n")
            f.write(json.dumps(event, separators=(",", ":")))
            first = False
        f.write("\n]}\n")
