"""The collectives backend: `init_process_group("nccl")` gets a process group whose NCCL calls are
described to the coordinator instead of run.

Note: [Standing in for ProcessGroupNCCL]
A CPU build of PyTorch has no ProcessGroupNCCL. c10d builds "nccl" groups (the default backend,
`cuda:nccl`, DeviceMesh's and `new_group`'s) by calling the module global `ProcessGroupNCCL` of
distributed_c10d, after checking `is_nccl_available()`. Installing `SimulatedNcclGroup` under that
name keeps every name the program can observe ("nccl" from `get_backend`, `is_nccl_available()`)
as on a real cluster, while every collective comes here. It is a Python `ProcessGroup` subclass:
c10d's Python functions call its methods directly, and PyTorch's C++ (DDP's reducer) reaches them
through the pybind trampoline. Each call follows ProcessGroupNCCL's stream semantics:
- the group has its own NCCL stream per device; a collective first makes that stream wait for
  the caller's current stream, then runs on it, then records an end event;
- `work.wait()` makes the *current stream* wait for the end event (the host goes on), except for
  `barrier`, whose wait blocks the host;
- point-to-point calls run on one stream per (group, peer pair), as NCCL's p2p communicators do;
  `batch_isend_irecv` and `_coalescing_manager` put their calls in one NCCL group.
Tensor values are never exchanged (they are fake); CPU objects are, for real, through the c10d
store (`all_gather_object` and friends), because programs branch on them.
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._subclasses.fake_tensor import FakeTensor

from phantora.protocol.records import CoalescedRecord, CollectiveRecord
from phantora.protocol.symmetry import BROKEN_SYMMETRY_EXIT_CODE, BROKEN_SYMMETRY_FILE, RankSymmetry, UsedGroup
from phantora.runtime import collective_values
from phantora.runtime.dispatch import KernelRecorder
from phantora.runtime.session import Session
from phantora.runtime.shadows import shadows

NCCL_VERSION = (2, 28, 9)
"""What `torch.cuda.nccl.version()` reports: the NCCL of the H200 machines Phantora is calibrated on."""

NCCL_DEFAULT_TIMEOUT = timedelta(minutes=10)
"""ProcessGroupNCCL's default timeout (c10d's `default_pg_nccl_timeout` on a CUDA build)."""

Carried = tuple[torch.Tensor, list[int], "collective_values.Combine"]
"""What a collective carries between ranks: its input, the group ranks that contribute, how values combine."""

_session: Session | None = None
"""Set by `install`; the backend is created by c10d, which cannot pass it along."""

_symmetry = RankSymmetry.everyone(1)
"""Which ranks run and which they stand for (protocol/symmetry.py Note [Representative ranks]); set by `install`."""

_used_groups: list[UsedGroup] = []

last_work: tuple[str, int, float] | None = None
"""The last NCCL call this rank launched as ProcessGroupNCCL's watchdog names it, the rank's rank in its group and
the group's timeout in seconds: what the launcher's hang watchdog reports (runtime/bootstrap.py `rank_status`)."""

_OP_TYPES = {"all_reduce": "ALLREDUCE", "all_gather": "ALLGATHER", "reduce_scatter": "REDUCE_SCATTER",
             "broadcast": "BROADCAST", "reduce": "REDUCE", "all_to_all": "ALLTOALL", "gather": "GATHER",
             "scatter": "SCATTER", "barrier": "ALLREDUCE", "send": "SEND", "recv": "RECV"}
"""c10d's OpType names (`opTypeToString`); ProcessGroupNCCL's barrier is an all-reduce."""
"""Every group this rank built and every transfer it made: what the launcher chooses a folding from."""

_world_store: dist.Store | None = None
"""The first group's store (the default group's, the same on every rank): kept until the process ends
(Note [The store outlives every rank's reads])."""


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def check_split_sizes(split_sizes, tensor: torch.Tensor, group_size: int) -> None:
    """ProcessGroupNCCL's checks of an all-to-all's split sizes for `tensor` (c10d `checkSplitSizes`), with
    its messages: a program that a GPU run would stop here stops here too. `split_sizes`: any sequence of
    integers c10d's C++ binding takes (Megatron passes numpy arrays)."""
    split_sizes = [] if split_sizes is None else [int(s) for s in split_sizes]
    if not split_sizes:
        if tensor.dim() == 0 or tensor.shape[0] % group_size:
            raise RuntimeError("Tensor's dim 0 does not divide equally across group size")
        return
    if len(split_sizes) != group_size:
        raise RuntimeError("Number of tensor splits not equal to group size")
    if sum(split_sizes) != tensor.shape[0]:
        raise RuntimeError("Split sizes doesn't match total dim 0 size")


def _device_index(tensors: list[torch.Tensor]) -> int:
    for t in tensors:
        if t.device.type == "cuda":
            return t.device.index if t.device.index is not None else torch.cuda.current_device()
    return torch.cuda.current_device()


class UnwaitedResults:
    """Note: [Unwaited NCCL results]
    A correct program orders every use of an NCCL call's result after the call: `work.wait()`, a
    CUDA future's wait, an event. Where that order is made in a way Phantora cannot see (DDP's
    reducer waits on a CUDA future in C++, which cannot hold fake tensors), the first kernel that
    touches a result still unwaited-for makes its stream wait for the call: the same order, placed
    where the data dependency is."""

    def __init__(self) -> None:
        self._by_storage: dict[int, NcclWork] = {}

    def __bool__(self) -> bool:
        return bool(self._by_storage)

    def add(self, work: "NcclWork", tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            if isinstance(t, FakeTensor):
                self._by_storage[t.untyped_storage()._cdata] = work

    def forget(self, work: "NcclWork") -> None:
        if self._by_storage:
            for key in [k for k, w in self._by_storage.items() if w is work]:
                del self._by_storage[key]

    def drop(self, storage_key: int) -> None:
        self._by_storage.pop(storage_key, None)

    def pop(self, t: torch.Tensor) -> "NcclWork | None":
        return self._by_storage.pop(t.untyped_storage()._cdata, None)

    def wait_for(self, tensors: list[torch.Tensor]) -> None:
        """Called before a kernel on `tensors` is launched."""
        for t in tensors:
            if isinstance(t, FakeTensor):
                work = self._by_storage.get(t.untyped_storage()._cdata)
                if work is not None:
                    work.wait()


unwaited = UnwaitedResults()


class NcclWork(dist.Work):
    """A launched NCCL call: waiting makes the current stream (or, for a barrier, the host) wait
    for the call's end event on its NCCL stream."""

    def __init__(self, session: Session, event_id: int, device: int, stream: int, result: list[torch.Tensor],
                 *, blocks_host: bool = False) -> None:
        super().__init__()
        self._session = session
        self._event_id = event_id
        self._device = device
        self._stream = stream
        self._result = result
        self._blocks_host = blocks_host

    def wait(self, timeout: timedelta | None = None) -> bool:
        session = self._session
        unwaited.forget(self)
        with session.lock:
            current = (self._device, torch.cuda.current_stream(self._device).stream_id)
            session.link.wait_event(session.stream_id(current), self._event_id)
            if self._blocks_host:
                session.link.sync("event", event_id=self._event_id)
        return True

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        with self._session.lock:
            self._session.host_work(self._session.host.query_ns(), "queries")
            return self._session.link.query("event", event_id=self._event_id) is not None

    def is_success(self) -> bool:
        return True

    def exception(self) -> None:
        return None

    def result(self) -> list[torch.Tensor]:
        return self._result

    def get_future(self) -> torch.futures.Future:
        """A completed future holding the results. A CUDA future cannot hold fake tensors (their
        storage is on the meta device), so the stream order its wait would give comes from
        Note [Unwaited NCCL results] instead."""
        future = torch.futures.Future()
        future.set_result(self._result)
        return future


class _Options:
    """Stands in for `ProcessGroupNCCL.Options` (attributes c10d and users set on it)."""

    def __init__(self, is_high_priority_stream: bool = False) -> None:
        self.is_high_priority_stream = is_high_priority_stream
        self.global_ranks_in_group: list[int] = []
        self.group_name = ""
        self._timeout = timedelta(minutes=10)
        self.split_from = None
        self.split_color = 0
        self.config = _NcclConfig()


class _NcclConfig:
    def __init__(self) -> None:
        self.blocking = 1
        self.cta_policy = 0


class SimulatedNcclGroup(dist.ProcessGroup):
    """Installed as `ProcessGroupNCCL`; see Note [Standing in for ProcessGroupNCCL]."""

    Options = _Options
    NCCL_CTA_POLICY_DEFAULT = 0
    NCCL_CTA_POLICY_EFFICIENCY = 1
    NCCL_CTA_POLICY_ZERO = 2

    def __init__(self, store: dist.Store, rank: int, size: int, options: _Options | None = None) -> None:
        super().__init__(rank, size)
        if _session is None:
            raise RuntimeError("phantora: the simulated NCCL backend is used before Phantora is installed")
        self._store = store
        global _world_store
        if _world_store is None:
            _world_store = store
        self.options = options or _Options()
        self.global_ranks = tuple(self.options.global_ranks_in_group or range(size))
        self._fits_symmetry = note_group(self.global_ranks)
        self._tag = self.options.group_name
        self._seq = 0
        self._p2p_seq: dict[tuple[int, int], int] = {}
        self._streams: dict[tuple[int, Any], int] = {}
        self._coalesced: list[CollectiveRecord] | None = None
        self._coalesced_results: list[torch.Tensor] = []
        self._object_calls = 0
        self._p2p_objects: dict[tuple[int, int], int] = {}

    # -- identity ----------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return "nccl"

    @property
    def name(self) -> str:  # type: ignore[override]
        return "nccl"

    @property
    def supports_coalescing(self) -> bool:
        return True

    def _set_group_name(self, name: str) -> None:
        super()._set_group_name(name)
        self._tag = name

    @property
    def group_name(self) -> str:  # type: ignore[override]
        return self._tag

    def _set_sequence_number_for_group(self) -> None:
        pass

    def _get_sequence_number_for_group(self) -> int:
        return self._seq

    def __repr__(self) -> str:
        return f"<SimulatedNcclGroup {self._tag!r} ranks={list(self.global_ranks)}>"

    def _get_backend(self, device: torch.device) -> "SimulatedNcclGroup":
        """c10d asks a group for its backend on a device (`init_process_group(device_id=...)`, `new_group`,
        DeviceMesh); a Python process group is its own backend on every device."""
        return self

    @property
    def supports_splitting(self) -> bool:
        """No communicator splitting (`split_group`): `new_group` then builds each group anew, as NCCL does
        without a bound device."""
        return False

    # -- lifecycle: nothing to tear down -----------------------------------------------------
    def abort(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def _shutdown(self) -> None:
        pass

    def _group_start(self) -> None:
        pass

    def _group_end(self) -> None:
        pass

    def _add_ephemeral_timeout(self, timeout: timedelta) -> None:
        pass

    def _set_default_timeout(self, timeout: timedelta) -> None:
        self.options._timeout = timeout

    def eager_connect_single_device(self, device: torch.device | None) -> None:
        pass

    def perform_nocolor_split(self, device: torch.device) -> None:
        pass

    @property
    def uid(self) -> int:
        return hash(self._tag) & 0xFFFF_FFFF

    # -- the mechanics of one NCCL call ------------------------------------------------------
    def _nccl_stream(self, device: int, peers: tuple[int, int] | None = None) -> int:
        """The group's stream on `device` (or the stream of one point-to-point peer pair)."""
        key = (device, peers)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = int(torch.cuda.Stream(device).stream_id)
        return stream

    def _launch(self, op: str, size_bytes: int, tensors: list[torch.Tensor], result: list[torch.Tensor], *,
                root: int | None = None, peers: tuple[int, int] | None = None,
                blocks_host: bool = False, values: Carried | None = None) -> NcclWork:
        """Issue one NCCL call (or add it to the open coalesced group): stream order, record, end event.
        `values`: what the call carries between ranks (Note [Values through collectives])."""
        session = _session
        device = _device_index(tensors)
        if values is None:
            shadows.forget(result)
        if any(t.device.type != "cuda" for t in tensors):
            session.warn_once("cpu-collective", f"a collective ({op}) on CPU tensors of an NCCL group is "
                                                "timed as an NCCL call and its values are not exchanged")
        if peers is None:
            if not self._fits_symmetry:
                stop_for_symmetry()
            group, seq, tag = self.global_ranks, self._next_seq(), self._tag
        else:  # own tag: a (src, dst) pair could equal a two-rank group's member list
            note_group(peers, whole=True, stop=True)
            group, seq, tag = peers, self._p2p_seq.get(peers, 0), self._tag + ":p2p"
            self._p2p_seq[peers] = seq + 1
        if values is not None:
            inp, contributors, combine = values
            collective_values.exchange(self._store, f"phantora/values/{tag}/{seq}", self.rank(), contributors,
                                       inp, result, combine, read_from=[self._stand_in(r) for r in contributors])
        with session.lock:
            session.host_work(session.host.collective_ns(), "collective calls")
            if self._coalesced is not None:  # the stream is chosen when the group ends
                self._coalesced.append(CollectiveRecord(0, session.link.host_ns, tuple(group), seq, op, size_bytes,
                                                        root, tag))
                self._coalesced_results.extend(result)
                return NcclWork(session, 0, device, 0, result)
            stream = self._nccl_stream(device, None if peers is None else tuple(sorted(peers)))
            stream_id = self._follow_current_stream(device, stream)
            link = session.link
            link.collective(CollectiveRecord(stream_id, link.host_ns, tuple(group), seq, op, size_bytes, root, tag))
            event_id = link.new_event_id()
            link.record_event(event_id, stream_id)
        self._note_work(op, seq, tensors, result)
        work = NcclWork(session, event_id, device, stream, result, blocks_host=blocks_host)
        unwaited.add(work, result)
        return work

    def _note_work(self, op: str, seq: int, tensors: list[torch.Tensor], result: list[torch.Tensor]) -> None:
        """Remember the call as ProcessGroupNCCL's watchdog would name it, should the job hang in it."""
        global last_work
        inputs = [t for t in tensors if not any(t is r for r in result)] or result
        timeout = self.options._timeout
        numel_in, numel_out = sum(t.numel() for t in inputs), sum(t.numel() for t in result)
        last_work = (f"WorkNCCL(SeqNum={seq + 1}, OpType={_OP_TYPES.get(op, op.upper())}, NumelIn={numel_in}, "
                     f"NumelOut={numel_out}, Timeout(ms)={int(timeout.total_seconds() * 1000)})",
                     self.rank(), timeout.total_seconds())

    def _follow_current_stream(self, device: int, stream: int) -> int:
        """The NCCL stream waits for the caller's current stream (ProcessGroupNCCL's syncStream)."""
        session = _session
        stream_id = session.stream_id((device, stream))
        current = (device, torch.cuda.current_stream(device).stream_id)
        session.link.wait_stream(stream_id, session.stream_id(current))
        return stream_id

    def _next_seq(self) -> int:
        seq = self._seq
        self._seq += 1
        return seq

    def _global(self, group_rank: int) -> int:
        return self.global_ranks[group_rank]

    def _stand_in(self, group_rank: int) -> int:
        """The group rank whose values and objects stand for `group_rank`'s: its representative's, a member of
        every group the symmetry admits (Note [Representative ranks])."""
        global_rank = self.global_ranks[group_rank]
        representative = _symmetry.representative(global_rank)
        return group_rank if representative == global_rank else self.global_ranks.index(representative)

    # -- coalescing (ncclGroupStart / ncclGroupEnd) ------------------------------------------
    def _start_coalescing(self, device: torch.device) -> None:
        if self._coalesced is not None:
            raise RuntimeError("phantora: nested NCCL coalescing on one process group")
        self._coalesced = []
        self._coalesced_results = []

    def _end_coalescing(self, device: torch.device) -> NcclWork:
        """One NCCL group on the group's stream: ends when every part has ended."""
        parts, results = self._coalesced or [], self._coalesced_results
        self._coalesced, self._coalesced_results = None, []
        session = _session
        index = device.index if device.index is not None else torch.cuda.current_device()
        if not parts:
            return NcclWork(session, 0, index, 0, [])
        with session.lock:
            stream = self._nccl_stream(index)
            stream_id = self._follow_current_stream(index, stream)
            link = session.link
            parts = tuple(replace(p, stream_id=stream_id) for p in parts)
            link.collective(CoalescedRecord(stream_id, link.host_ns, parts))
            event_id = link.new_event_id()
            link.record_event(event_id, stream_id)
        work = NcclWork(session, event_id, index, stream, results)
        unwaited.add(work, results)
        return work

    # -- collectives -------------------------------------------------------------------------
    def _carried(self, inputs: list[torch.Tensor], combine: collective_values.Combine,
                 root: int | None = None) -> Carried | None:
        """What a collective on `inputs` carries: its input, its contributors (every group rank, or the
        group rank `root`) and how their values combine; None where it carries none."""
        if not collective_values.carries_values(inputs):
            return None
        return inputs[0], list(range(self.size())) if root is None else [root], combine

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        values = self._carried(tensors, collective_values.all_reduce(op, tensors[0].dtype))
        return self._launch("all_reduce", sum(map(_nbytes, tensors)), tensors, tensors, values=values)

    def allreduce_coalesced(self, tensors, opts=None):
        self._start_coalescing(tensors[0].device)
        for t in tensors:
            self.allreduce([t])
        return self._end_coalescing(tensors[0].device)

    def broadcast(self, tensors, opts=None):
        group_root = opts.rootRank if opts is not None else 0
        values = self._carried(tensors, collective_values.broadcast, root=group_root)
        return self._launch("broadcast", sum(map(_nbytes, tensors)), tensors, tensors, root=self._global(group_root),
                            values=values)

    def reduce(self, tensors, opts=None):
        root = self._global(opts.rootRank if opts is not None else 0)
        return self._launch("reduce", sum(map(_nbytes, tensors)), tensors, tensors, root=root)

    def allgather(self, output_lists, inputs, opts=None):
        outputs = [t for lst in output_lists for t in lst]
        values = self._carried(inputs, collective_values.all_gather(into_one=False))
        return self._launch("all_gather", _nbytes(inputs[0]) * self.size(), [*inputs, *outputs], outputs,
                            values=values)

    def _allgather_base(self, output, input, opts=None):
        values = self._carried([input], collective_values.all_gather(into_one=True))
        return self._launch("all_gather", _nbytes(output), [input, output], [output], values=values)

    all_gather_single = _allgather_base

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        self._start_coalescing(inputs[0].device)
        for outs, inp in zip(output_lists, inputs):
            self.allgather([outs], [inp])
        return self._end_coalescing(inputs[0].device)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        self._start_coalescing(inputs[0].device)
        for out, inp in zip(outputs, inputs):
            self._allgather_base(out, inp)
        return self._end_coalescing(inputs[0].device)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        inputs = [t for lst in input_lists for t in lst]
        return self._launch("reduce_scatter", _nbytes(outputs[0]) * self.size(), [*outputs, *inputs], outputs)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._launch("reduce_scatter", _nbytes(input), [output, input], [output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        self._start_coalescing(inputs[0].device)
        for out, inp in zip(outputs, inputs):
            self._reduce_scatter_base(out, inp)
        return self._end_coalescing(inputs[0].device)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        check_split_sizes(output_split_sizes, output, self.size())
        check_split_sizes(input_split_sizes, input, self.size())
        return self._launch("all_to_all", _nbytes(input), [output, input], [output])

    all_to_all_single = alltoall_base

    def alltoall(self, outputs, inputs, opts=None):
        return self._launch("all_to_all", sum(map(_nbytes, inputs)), [*outputs, *inputs], outputs)

    def gather(self, output_lists, inputs, opts=None):
        root = self._global(opts.rootRank if opts is not None else 0)
        outputs = [t for lst in output_lists for t in lst]
        return self._launch("gather", _nbytes(inputs[0]) * self.size(), [*inputs, *outputs], outputs, root=root)

    def scatter(self, outputs, input_lists, opts=None):
        root = self._global(opts.rootRank if opts is not None else 0)
        inputs = [t for lst in input_lists for t in lst]
        return self._launch("scatter", _nbytes(outputs[0]) * self.size(), [*outputs, *inputs], outputs, root=root)

    def barrier(self, opts=None):
        marker = torch.empty(1, device=torch.device("cuda", torch.cuda.current_device()))
        return self._launch("barrier", 4, [marker], [marker], blocks_host=True)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self.barrier().wait()

    def send(self, tensors, dst, tag=0):
        me = self._global(self.rank())
        return self._launch("send", sum(map(_nbytes, tensors)), tensors, tensors, peers=(me, self._global(dst)))

    def recv(self, tensors, src, tag=0):
        me = self._global(self.rank())
        return self._launch("recv", sum(map(_nbytes, tensors)), tensors, tensors, peers=(self._global(src), me))

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("phantora: recv from any source is not supported by NCCL (nor here)")

    # -- real exchange of CPU objects through the store --------------------------------------
    def send_objects(self, obj: Any, peer: int) -> int:
        """Publish `obj` for group rank `peer`'s next `recv_objects` from us; returns its pickled size."""
        me = self.rank()
        note_group((self._global(me), self._global(peer)), whole=True, stop=True)
        n = self._p2p_objects.get((me, peer), 0)
        self._p2p_objects[(me, peer)] = n + 1
        data = pickle.dumps(obj)
        self._store.set(f"phantora/p2p-objects/{me}-{peer}/{n}", data)
        return len(data)

    def recv_objects(self, peer: int) -> tuple[Any, int]:
        """The next object group rank `peer` sent us, and its pickled size. Note [Objects after a sync]:
        c10d receives the object's size first and reads it on the host; so do we, and only then read
        the store, where the sender put the object before it sent the size."""
        me = self.rank()
        note_group((self._global(peer), self._global(me)), whole=True, stop=True)
        n = self._p2p_objects.get((peer, me), 0)
        self._p2p_objects[(peer, me)] = n + 1
        _object_p2p_part(self, peer, 8, send=False)
        data = self._store.get(f"phantora/p2p-objects/{peer}-{me}/{n}")
        return pickle.loads(data), len(data)

    def exchange_objects(self, obj: Any, kind: str, *, sources: list[int] | None = None,
                         root: int | None = None) -> dict[int, tuple[Any, int]]:
        """Publish `obj` (if this rank is a source), exchange the sizes as c10d does (an `all_gather`
        or a `broadcast` from global rank `root`, read on the host), then read every source's object
        and its pickled size, by group rank (Note [Objects after a sync])."""
        call = self._object_calls
        self._object_calls += 1
        me = self.rank()
        sources = list(range(self.size())) if sources is None else sources
        key = f"phantora/objects/{call}"
        if me in sources:
            self._store.set(f"{key}/{me}", pickle.dumps(obj))
        _object_collective_part(self, kind, 8 * self.size() if kind == "all_gather" else 8, root)
        received = {r: self._store.get(f"{key}/{self._stand_in(r)}") for r in sources}
        return {r: (pickle.loads(data), len(data)) for r, data in received.items()}


def wait_for_every_rank_to_end() -> None:
    """Note: [The store outlives every rank's reads]
    Values carried by collectives and the objects of `*_object*` calls are read from the c10d store after
    the host waited for the GPU (Note [Values through collectives]), which may be after the store's host has
    ended: rank 0 hosts it (init_process_group's env:// rendezvous without an agent store), and a fast
    rank 0 finishes its last step and exits while a slower rank, in real time, still reads the step's
    grad norm. On a GPU that read needs no other process, so neither may it here: every rank that ends well
    says so in the store, and the one that ends the count lets the others go; each waits for that before its
    process exits, which keeps the store's server up until no rank reads it. A rank that fails makes the
    launcher stop every rank. The store is held from the default group's creation, so the program's
    `destroy_process_group` does not stop its server either."""
    if _world_store is None:
        return
    store = _world_store
    if store.add("phantora/ended", 1) == _symmetry.processes:  # the world, or its representatives
        store.set("phantora/all-ended", b"1")
    try:
        store.wait(["phantora/all-ended"])
    except dist.DistError:
        pass  # the store's host ended first: no rank is left to read from it


def note_group(group: tuple[int, ...], *, whole: bool = False, stop: bool = False) -> bool:
    """Remember a group this rank built (or a transfer, or a real backend's group: `whole`, all its members
    must run); whether the folding admits it. `stop`: stop at once if not (Note [Representative ranks])."""
    if not _symmetry.mirrored:
        return True
    used = UsedGroup(tuple(group), whole)
    if used not in _used_groups:
        _used_groups.append(used)
    fits = _symmetry.admits(used.ranks, whole=whole)
    if not fits and stop:
        stop_for_symmetry()
    return fits


def stop_for_symmetry() -> None:
    """The program uses a group the folding does not admit: write every group this rank built and exit, for
    the launcher to start the job again with a folding that admits them. Not an exception: the program must
    not catch it. A group that is built but never used costs no restart."""
    record = [{"ranks": list(g.ranks), "whole": g.whole} for g in _used_groups]
    (_session.config.rank_dir / BROKEN_SYMMETRY_FILE).write_text(json.dumps(record))
    os._exit(BROKEN_SYMMETRY_EXIT_CODE)


_REAL_BACKENDS = ("gloo", "mpi", "ucc")
"""Backends that move real data between the member processes (not "nccl": simulated; not "fake": silent)."""


def _checked_group_creation(create):
    """c10d's one constructor of process groups, of every backend: the group must fit the symmetry."""
    signature = inspect.signature(create)

    def create_checked(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        ranks, backend = tuple(bound.get("global_ranks_in_group") or ()), str(bound.get("backend", ""))
        real = any(part.rsplit(":", 1)[-1] in _REAL_BACKENDS for part in backend.split(","))
        if not ranks:  # the default group: the whole world
            ranks = tuple(range(_symmetry.world_size))
        elif c10d.GroupMember.WORLD is None or c10d.get_rank() not in ranks:
            return create(*args, **kwargs)
        if real:  # gloo and other real backends exchange real data with every member, now
            note_group(ranks, whole=True, stop=True)
        return create(*args, **kwargs)

    return create_checked


def create_simulated_nccl(store: dist.Store, rank: int, size: int, options: _Options) -> SimulatedNcclGroup:
    return SimulatedNcclGroup(store, rank, size, options)


# --- c10d functions that need more than the backend ---------------------------------------------
def _group(group: dist.ProcessGroup | None) -> SimulatedNcclGroup:
    pg = group if group is not None else c10d._get_default_group()
    if not isinstance(pg, SimulatedNcclGroup):
        raise NotImplementedError(f"phantora: object collectives need an NCCL process group, got {pg!r}")
    return pg


# Note [Objects after a sync]
# Object collectives exchange real CPU objects through the store, and a rank must never wait on the
# store while the coordinator counts it active: its clock would hold back the network, and with it
# the reply a peer blocked in a sync needs before it can publish (a 4-stage pipeline's start-up hung
# so). c10d itself first exchanges the objects' sizes on the GPU and reads them on the host; here
# that size exchange is issued and synced through the coordinator first (the rank is blocked, not
# active), and every source publishes its object before it issues its part, so once the sync
# returns the store read does not wait.
def _object_collective_part(pg: SimulatedNcclGroup, kind: str, nbytes: int, root: int | None) -> None:
    """One GPU collective of an object collective (`all_gather`, or `broadcast` from global rank
    `root`), read back on the host as c10d does."""
    device = torch.cuda.current_device()
    tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    pg._launch(kind, nbytes, [tensor], [tensor], root=None if kind == "all_gather" else root).wait()
    _session.wait_for_stream((device, torch.cuda.current_stream(device).stream_id))


def _object_p2p_part(pg: SimulatedNcclGroup, peer: int, nbytes: int, *, send: bool) -> None:
    """One GPU transfer of `send_object_list`/`recv_object_list`; the receiver reads it on the host."""
    device = torch.cuda.current_device()
    tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    (pg.send if send else pg.recv)([tensor], peer).wait()
    if not send:
        _session.wait_for_stream((device, torch.cuda.current_stream(device).stream_id))


def all_gather_object(object_list: list[Any], obj: Any, group: dist.ProcessGroup | None = None) -> None:
    pg = _group(group)
    objects = pg.exchange_objects(obj, "all_gather")
    _object_collective_part(pg, "all_gather", pg.size() * max(size for _, size in objects.values()), None)
    for r in range(pg.size()):
        object_list[r] = objects[r][0]


def gather_object(obj: Any, object_gather_list: list[Any] | None = None, dst: int | None = None,
                  group: dist.ProcessGroup | None = None, group_dst: int | None = None) -> None:
    pg = _group(group)
    root = group_dst if group_dst is not None else (c10d.get_group_rank(pg, dst) if dst is not None else 0)
    objects = pg.exchange_objects(obj, "all_gather")
    _object_collective_part(pg, "all_gather", pg.size() * max(size for _, size in objects.values()), None)
    if pg.rank() == root and object_gather_list is not None:
        for r in range(pg.size()):
            object_gather_list[r] = objects[r][0]


def broadcast_object_list(object_list: list[Any], src: int | None = None, group: dist.ProcessGroup | None = None,
                          device: torch.device | None = None, group_src: int | None = None) -> None:
    pg = _group(group)
    root = group_src if group_src is not None else (c10d.get_group_rank(pg, src) if src is not None else 0)
    sent, size = pg.exchange_objects(list(object_list), "broadcast", sources=[root], root=pg.global_ranks[root])[root]
    _object_collective_part(pg, "broadcast", size, pg.global_ranks[root])
    object_list[:] = sent


def scatter_object_list(scatter_object_output_list: list[Any], scatter_object_input_list: list[Any] | None = None,
                        src: int | None = None, group: dist.ProcessGroup | None = None,
                        group_src: int | None = None) -> None:
    pg = _group(group)
    root = group_src if group_src is not None else (c10d.get_group_rank(pg, src) if src is not None else 0)
    sent, _ = pg.exchange_objects(list(scatter_object_input_list or []), "broadcast", sources=[root],
                                  root=pg.global_ranks[root])[root]
    _object_collective_part(pg, "broadcast", max(len(pickle.dumps(o)) for o in sent) if sent else 0,
                            pg.global_ranks[root])
    scatter_object_output_list[0] = sent[pg.rank()]


def send_object_list(object_list: list[Any], dst: int | None = None, group: dist.ProcessGroup | None = None,
                     device: torch.device | None = None, group_dst: int | None = None, use_batch: bool = False) -> None:
    pg = _group(group)
    peer = group_dst if group_dst is not None else c10d.get_group_rank(pg, dst)
    size = pg.send_objects(list(object_list), peer)  # published before the size is sent (Note [Objects after a sync])
    _object_p2p_part(pg, peer, 8, send=True)
    _object_p2p_part(pg, peer, size, send=True)


def recv_object_list(object_list: list[Any], src: int | None = None, group: dist.ProcessGroup | None = None,
                     device: torch.device | None = None, group_src: int | None = None,
                     use_batch: bool = False) -> int:
    pg = _group(group)
    peer = group_src if group_src is not None else c10d.get_group_rank(pg, src)
    received, size = pg.recv_objects(peer)
    _object_p2p_part(pg, peer, size, send=False)
    object_list[:len(received)] = received
    return pg.global_ranks[peer]


def verify_param_shapes_across_processes(process_group: dist.ProcessGroup, tensors: list[torch.Tensor],
                                         logger: Any = None) -> None:
    """DDP's check that every rank has the same parameters, done for real on shapes (its C++ version
    reads the all-gathered metadata back from GPU memory, which holds no values here)."""
    pg = _group(process_group)
    mine = [(tuple(t.shape), str(t.dtype)) for t in tensors]
    theirs = pg.exchange_objects(mine, "all_gather")
    for r, (shapes, _) in sorted(theirs.items()):
        if shapes != mine:
            raise RuntimeError(f"DDP expects the same parameters on every rank: rank {pg.rank()} has {len(mine)} "
                               f"parameters, rank {r} has {len(shapes)} (or their shapes or dtypes differ)")
    _object_collective_part(pg, "all_gather", pg.size() * 8 * (1 + sum(len(s) for s, _ in mine)), None)


def batch_isend_irecv(p2p_op_list: list[dist.P2POp]) -> list[dist.Work]:
    """As c10d's, but NCCL-style coalescing also for this Python process group."""
    c10d._check_p2p_op_list(p2p_op_list)
    group = p2p_op_list[0].group or c10d._get_default_group()
    device = p2p_op_list[0].tensor.device
    if not isinstance(group, SimulatedNcclGroup):
        return _original["batch_isend_irecv"](p2p_op_list)
    group._start_coalescing(device)
    for op in p2p_op_list:
        peer = {"group_dst" if op.op is dist.isend else "group_src": op.group_peer}
        op.op(op.tensor, group=op.group, tag=op.tag, **peer)
    return [group._end_coalescing(device)]


class _DdpLogger(dist.Logger):
    """DDP's logger, minus the runtime statistics: they read the reducer's timer, which under Phantora
    measures nothing (Note [DDP's timer] in runtime/csrc/phantora_cuda.cpp), and they only feed DDP's usage
    logging."""

    def set_runtime_stats_and_log(self) -> None:
        pass


_original: dict[str, Any] = {}

_OBJECT_COLLECTIVES = {
    "all_gather_object": all_gather_object,
    "gather_object": gather_object,
    "broadcast_object_list": broadcast_object_list,
    "scatter_object_list": scatter_object_list,
    "send_object_list": send_object_list,
    "recv_object_list": recv_object_list,
    "batch_isend_irecv": batch_isend_irecv,
}


def install(session: Session, recorder: KernelRecorder) -> None:
    """Make "nccl" process groups simulated ones; see Note [Standing in for ProcessGroupNCCL]."""
    global _session, _symmetry
    _session = session
    config = session.config
    _symmetry = RankSymmetry.from_json(config.world_size, config.folded_axes)
    if _symmetry.mirrored:
        c10d._new_process_group_helper = _checked_group_creation(c10d._new_process_group_helper)
    recorder.unwaited = unwaited
    recorder.memory.new_storage_listeners.append(unwaited.drop)
    torch._C._nccl_version = lambda: NCCL_VERSION[0] << 32 | NCCL_VERSION[1] << 16 | NCCL_VERSION[2]
    torch._C._nccl_version_suffix = lambda: b""
    c10d.ProcessGroupNCCL = SimulatedNcclGroup
    c10d._NCCL_AVAILABLE = True
    c10d.default_pg_nccl_timeout = NCCL_DEFAULT_TIMEOUT  # a CPU build has none, and warns at every group
    dist.ProcessGroupNCCL = SimulatedNcclGroup
    for name, fn in _OBJECT_COLLECTIVES.items():
        _original[name] = getattr(c10d, name)
        setattr(c10d, name, fn)
        setattr(dist, name, fn)
    import torch.distributed.utils as dist_utils
    import torch.nn.parallel.distributed as ddp
    dist_utils._verify_param_shape_across_processes = verify_param_shapes_across_processes
    ddp._verify_param_shape_across_processes = verify_param_shapes_across_processes
    dist.Logger = _DdpLogger
    _skip_dtensor_rng_state_sync()


def _skip_dtensor_rng_state_sync() -> None:
    """DTensor keeps every rank's CUDA Philox offsets in step for random ops on sharded tensors,
    syncing state through the GPU. A simulated GPU draws no random values, so DTensor is told its
    mesh has no RNG support and runs random ops locally (the same kernels, without the offset
    bookkeeping around them)."""
    from torch.distributed.tensor import _dispatch, _random

    _random.is_rng_supported_mesh = lambda device_mesh: False
    _dispatch.is_rng_supported_mesh = _random.is_rng_supported_mesh
