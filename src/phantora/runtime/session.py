"""The simulation state of one rank process: host clock, link to the coordinator, memory and cost
models, statistics.

Everything the interception layer (`dispatch`, `cuda_api`, `clock`, `distributed`) learns goes
through the one `Session` object of the process: it costs each op with the pure models, charges
the host, and describes the GPU work to the coordinator through its `EngineLink`, which alone
knows when that work runs (runtime/engine_link.py).
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass, field

from phantora.config.run import RankConfig
from phantora.models.compute import ComputeModel
from phantora.models.gpu import GpuSpec
from phantora.models.host import HostModel
from phantora.models.host_contention import HostSpeed, contention_for
from phantora.models.measured_host import host_model_for
from phantora.models.memory import AllocatorConfig, CachingAllocatorModel
from phantora.models.ops import KernelEstimate, OpCall, TensorMeta, touches_no_element
from phantora.profiler.database import combined_database
from phantora.profiler.oplog import OpLog
from phantora.protocol.records import encode_stream
from phantora.protocol.symmetry import RankSymmetry
from phantora.runtime.allocator_events import CoordinatorEventProbe
from phantora.runtime.clock import forked_from_rank
from phantora.runtime.engine_link import EngineLink, Transport
from phantora.runtime.memory_samples import MemorySamples
from phantora.specs import profile_for

StreamKey = tuple[int, int]
"""(device index, stream id); stream id 0 is the device's default stream."""


class UnmodelledOpError(RuntimeError):
    """Raised under --strict for an op that only has a generic cost estimate."""


@dataclass(slots=True)
class OpStats:
    """Counts of what was intercepted, for the summary."""

    kernels: int = 0
    host_only_ops: int = 0
    flops: float = 0.0
    bytes_moved: float = 0.0
    kernel_ns_by_class: collections.Counter = field(default_factory=collections.Counter)
    host_ns_by_term: collections.Counter = field(default_factory=collections.Counter)
    """Host time the host model charged, by its term, at this rank's host speed (the summary's host work)."""
    subclass_ops: int = 0
    """Ops dispatched by a tensor subclass (DTensor) before its local ops."""
    subclass_backward_ops: int = 0
    """... of them, those the autograd engine issued."""
    async_collective_ops: int = 0
    """... of them, those a functional collective's result (`AsyncCollectiveTensor`) dispatched."""
    gemm_problems: int = 0
    """Distinct GEMM problems run, each paying cuBLAS's algorithm selection once."""
    gemm_kernel_loads: int = 0
    """cuBLAS kernels launched for the first time in the process (models/gemm_kernels.py)."""
    generic_ops: collections.Counter = field(default_factory=collections.Counter)
    """Op name -> calls that got only a generic memory-bound estimate."""
    compiled: collections.Counter = field(default_factory=collections.Counter)
    """`torch.compile` (runtime/inductor.py): "regions" Dynamo compiled, "graphs" Inductor planned (forward and
    backward graphs), "kernels" in their plans, and "eager: <why>" for each region that fell back to eager."""
    kernel_sources: collections.Counter = field(default_factory=collections.Counter)
    """Kernels by where their duration came from: "measured" (a kernel database), "analytic" (the fitted model),
    "generic" (a memory-bound guess for an op with no model)."""
    kernel_ns_by_source: collections.Counter = field(default_factory=collections.Counter)
    """Their durations (alone, before interference) by the same sources: how much of the GPU time each rests on."""
    warnings: list[str] = field(default_factory=list)
    placeholders: collections.Counter = field(default_factory=collections.Counter)
    """Value-dependent results answered with placeholder values, by kind."""

    ops_in_library_python: int = 0
    """Ops a priced library function issued by operator syntax, whose host cost its price holds (runtime/
    python_prices.py Note [Ops in a price])."""
    ops_without_elements: int = 0
    """Kernel ops whose tensors all had no element: host time only, no kernel (models/ops.py Note [Ops without
    elements]); counted among the host-only ops too."""

    def intercepted_ops(self) -> int:
        """Every op the rank intercepted: kernels, host-only ops and tensor subclass ops."""
        return self.kernels + self.host_only_ops + self.subclass_ops


@dataclass(slots=True)
class CostedOp:
    """What the models say of one op call: pure functions of it, worked out once per distinct call."""

    op: OpCall
    estimate: KernelEstimate
    host_ns: int
    """Host time when issued from Python (models/host.py `op_ns`)..."""
    engine_host_ns: int
    """... and when issued by the autograd engine."""
    gemm_problem: tuple | None
    """What cuBLAS keys its algorithm choice by; None for other ops."""
    detail: str
    """Its tensors, for the trace ("" without one)."""
    launches: bool = True
    """Whether it runs a kernel: not where its tensors hold no element (models/ops.py Note [Ops without elements])."""
    calls: list | None = None
    """Its counter in the op log, once launched (`Session._log`)."""


def _main_thread_pays() -> bool:
    """Whether host work on CPU tensors is charged here: only the program's main thread, in the rank's own process,
    pays. A pin-memory thread works beside it, and a process forked from the rank (a DataLoader worker collating) must
    not touch the rank's session, whose lock the flusher thread may have held at the fork (the worker then waited on
    it for ever)."""
    return not forked_from_rank() and threading.current_thread() is threading.main_thread()


class _OpInPrice(threading.local):
    value = False
    """Whether the op being dispatched on this thread runs inside a priced library function's own time, whose price
    holds the op's host cost (runtime/python_prices.py Note [Ops in a price])."""


class Session:
    """Simulation state of one process (one rank, possibly several visible devices)."""

    def __init__(self, config: RankConfig, transport: Transport, flush_interval_s: float | None = 0.01, *,
                 gpu: GpuSpec | None = None, compute: ComputeModel | None = None,
                 host: HostModel | None = None) -> None:
        self.config = config
        self.profile = profile_for(config.gpu, config.gpu_variant)
        """The simulated GPU's profile (specs/<gpu>/): every model's inputs, resolved once per process."""
        self.gpu = gpu or self.profile.spec
        if compute is None:  # --kernel-db files over the shipped database (unless --no-kernel-db)
            database = combined_database(self.gpu.key, config.kernel_databases, packaged=config.use_kernel_database)
            compute = ComputeModel(self.gpu, database, self.profile.calibration.value)
        self.compute = compute
        self.op_log = OpLog()
        """Every distinct op costed, for `<out>/rank<N>/ops.jsonl` (what `phantora profile` measures)."""
        self.on_the_fly = None
        if config.profile_worker:
            from phantora.profiler.onthefly import OnTheFlyClient
            self.on_the_fly = OnTheFlyClient(config.profile_worker)
        self._not_measured: set[OpCall] = set()
        self.host = host or host_model_for(config.host_time, self.profile.host.value, config.host_time_scale)
        measured = self.profile.host_contention.value
        self.host_speed = HostSpeed(contention_for(config.host_contention, measured), config.rank, config.world_size,
                                    measured, stands_for=RankSymmetry.from_json(config.world_size, config.folded_axes).mirrors(config.rank))
        """This rank's place among contended hosts (models/host_contention.py); the model's costs only."""
        self.lock = threading.RLock()
        self.op_in_price = _OpInPrice()
        self.link = EngineLink(transport, self.lock, flush_interval_s=flush_interval_s)
        allocator_config = AllocatorConfig.from_env(os.environ)
        self.allocators = [
            CachingAllocatorModel(self.gpu.total_memory_bytes, self.gpu.cuda_context_bytes,
                                  config=allocator_config, device_index=i)
            for i in range(config.devices_per_process)
        ]
        for device, allocator in enumerate(self.allocators):
            allocator.event_probe = CoordinatorEventProbe(self.link, device, self.stream_id)
        self.stats = OpStats()
        self.memory_samples = MemorySamples()
        """(simulated ns, device, allocated bytes, reserved bytes) after each allocator change, in bounded
        memory (runtime/memory_samples.py Note [Bounded memory samples])."""
        self._stream_ids: dict[StreamKey, int] = {}
        """Each stream used and its coordinator id (`stream_id`)."""
        self._warned: set[str] = set()
        self._contention_ns = 0
        """Host time still owed to other threads of the program (`thread_steal_ns`)."""
        self._costs: dict[OpCall, CostedOp] = {}
        """Each distinct op call's costs (`cost`)."""
        self._gemm_problems: set[tuple] = set()
        """GEMM problems this process has run (cuBLAS chose their algorithms: `_gemm_select_ns`)."""
        self.gemm_kernels = self.profile.gemm_kernels.value
        self._gemm_kernels: set[str] = set()
        """cuBLAS kernels this process has launched (Note [First launch of a cuBLAS kernel])."""
        self.graph_capture = None
        """The CUDA graph capturing now (runtime/cuda_graphs.py `GraphCapture`), which takes the kernels it captures
        instead of the GPU; None when nothing captures."""
        self.host_timer = None
        """With `--host-time measured`: charges the program's own CPU time between intercepted calls
        (runtime/host_time.py Note [Measured host time]); None with the host model alone (default)."""
        if config.host_time == "measured":
            from phantora.runtime.host_time import install_session_timer
            self.host_timer = install_session_timer(self)

    # -- host time ---------------------------------------------------------------------------
    def now_ns(self) -> int:
        return self.link.host_ns

    def host_work(self, duration_ns: int, term: str = "other") -> None:
        """The host CPU works for `duration_ns` (a host-model cost: this rank's host speed applies), counted to the
        host model's `term` in the summary."""
        with self.lock:
            self._charge(duration_ns, term)

    def host_wait(self, duration_ns: int) -> None:
        """The program sleeps for `duration_ns` (no CPU work: the host's speed does not apply; the summary keeps
        it apart from GPU idle time)."""
        with self.lock:
            self.link.sleep(duration_ns)

    def _charge(self, cost_ns: int, term: str) -> None:
        """Advance the host clock by a host-model cost, at this rank's host speed, and count it to `term`."""
        link = self.link
        ns = round(cost_ns * self.host_speed.factor(link.host_ns))
        self.stats.host_ns_by_term[term] += ns
        link.advance_host(ns)

    def subclass_op(self, tensors: int, *, backward: bool = False) -> None:
        """A tensor subclass (DTensor) dispatches an op with `tensors` subclass arguments itself;
        `backward`: the autograd engine issued the op (models/host.py)."""
        with self.lock:
            self.stats.subclass_ops += 1
            self.stats.subclass_backward_ops += backward
            self._charge(self.host.subclass_op_ns(tensors, backward=backward), "tensor subclass ops")

    def async_collective_op(self, outputs: int, mapped: bool) -> None:
        """A functional collective's result dispatches an op itself, wrapping `outputs` outputs (a view op's;
        0: it waits on its arguments); `mapped`: through its general path (models/host.py)."""
        with self.lock:
            self.stats.subclass_ops += 1
            self.stats.async_collective_ops += 1
            self._charge(self.host.async_collective_op_ns(outputs, mapped=mapped), "tensor subclass ops")

    def thread_steal_ns(self, duration_ns: int) -> None:
        """CPU time another thread of the program takes from the one issuing ops (a DataLoader's
        pin-memory thread): the kernel ops issued next pay it, each at most its own cost again, so a
        host-bound step grows by `duration_ns` and a GPU-bound one does not wait for it up front."""
        with self.lock:
            self._contention_ns += duration_ns

    def _with_contention(self, cost_ns: int) -> int:
        extra = min(self._contention_ns, cost_ns)
        self._contention_ns -= extra
        return cost_ns + extra

    # -- kernels -----------------------------------------------------------------------------
    def stream_id(self, stream: StreamKey) -> int:
        """The coordinator's id of a (device, stream) of this process."""
        stream_id = self._stream_ids.get(stream)
        if stream_id is None:
            stream_id = self._stream_ids[stream] = encode_stream(*stream)
        return stream_id

    def launch_kernel(self, op: OpCall, stream: StreamKey, *, backward: bool = False) -> None:
        """Cost `op`, charge the host its launch overhead, and launch the kernel on `stream`;
        `backward`: the autograd engine issues it (models/host.py)."""
        self.launch_costed(self.cost(op), stream, backward=backward)

    def cost(self, op: OpCall) -> CostedOp:
        """What the models say of `op`, worked out once per distinct call (they are pure functions of it),
        unless on-the-fly profiling may change estimates as it measures."""
        if self.on_the_fly is not None:
            return self._cost(op)
        try:
            costed = self._costs.get(op)
        except TypeError:  # unhashable arguments: cost it each time
            return self._cost(op)
        if costed is None:
            costed = self._costs[op] = self._cost(op)
        return costed

    @property
    def costs_are_fixed(self) -> bool:
        """Whether a call's `cost` never changes (it may under on-the-fly profiling), so callers may keep it."""
        return self.on_the_fly is None

    def _cost(self, op: OpCall) -> CostedOp:
        estimate = self.compute.estimate(op)
        if self.on_the_fly is not None and estimate.source != "measured":
            estimate = self._measure_on_the_fly(op, estimate)
        return CostedOp(op, estimate, self.host.op_ns(op), self.host.op_ns(op, backward=True),
                        self.host.gemm_problem(op), describe_tensors(op) if self.config.trace else "",
                        launches=not touches_no_element(op))

    def launch_costed(self, costed: CostedOp, stream: StreamKey, *, backward: bool = False,
                      charge_host: bool = True, host_ns: int | None = None) -> None:
        """`launch_kernel` of an op already costed; `charge_host`: False for a kernel the host does not launch
        itself (a CUDA graph's, replayed: runtime/cuda_graphs.py); `host_ns`: the host's cost of launching it where
        not the op's own (a compiled graph's kernel: runtime/inductor.py)."""
        estimate = costed.estimate
        if estimate.source == "generic" and costed.launches:  # an op that runs no kernel needs no cost model
            self._note_generic(costed.op)
        with self.lock:
            if charge_host:
                if self._paid_by_price():
                    host_ns = 0
                else:
                    if host_ns is None:
                        host_ns = costed.engine_host_ns if backward else costed.host_ns
                    if self._contention_ns:
                        host_ns = self._with_contention(host_ns)
                if costed.gemm_problem is not None and costed.launches:
                    host_ns += self._gemm_select_ns(costed)
                self._charge(host_ns, "ops")
            if not costed.launches:
                self.stats.host_only_ops += 1
                self.stats.ops_without_elements += 1
                return
            if self.graph_capture is not None and self.graph_capture.capture(costed, stream):
                return
            stream_id = self._stream_ids.get(stream)
            if stream_id is None:
                stream_id = self.stream_id(stream)
            self.link.kernel(stream_id, estimate.duration_ns, costed.op.name, flops=estimate.flops,
                             bytes_moved=estimate.bytes_moved, kernel_class=estimate.kernel_class,
                             detail=costed.detail)
            self._count(estimate)
            counter = costed.calls  # `_log`, inline while the op has its counter
            if counter is None:
                self._log(costed)
            else:
                counter[0] += 1

    def _log(self, costed: CostedOp) -> None:
        """Count the call in the op log (profiler/oplog.py Note [Counting ops on the hot path])."""
        counter = costed.calls
        if counter is None:
            counter = costed.calls = self.op_log.counter(costed.op, costed.estimate)
            if counter is None:
                self.op_log.unhashable += 1
                return
        counter[0] += 1

    def _gemm_select_ns(self, costed: CostedOp) -> int:
        """cuBLAS chooses an algorithm the first time the process runs a GEMM problem (models/host.py)."""
        problem = costed.gemm_problem
        if problem is None or problem in self._gemm_problems:
            return 0
        self._gemm_problems.add(problem)
        self.stats.gemm_problems += 1
        return self.host.gemm_select_ns() + self._gemm_kernel_load_ns(costed.op, problem)

    def _gemm_kernel_load_ns(self, op: OpCall, problem: tuple) -> int:
        """The first launches of the kernels cuBLAS runs for a new GEMM problem, where they are known
        (models/gemm_kernels.py Note [First launch of a cuBLAS kernel])."""
        new = [k for k in dict.fromkeys(self._gemm_kernel_names(op, problem)) if k not in self._gemm_kernels]
        self._gemm_kernels.update(new)
        self.stats.gemm_kernel_loads += len(new)
        return len(new) * self.host.gemm_kernel_load_ns()

    def _gemm_kernel_names(self, op: OpCall, problem: tuple) -> tuple[str, ...]:
        """The GPU's table of cuBLAS's picks, else the kernels a profile of this exact op recorded."""
        packet, _, inputs = problem
        kernel = self.gemm_kernels.kernel(packet, inputs)
        if kernel is not None:
            return (kernel,)
        hit = self.compute.database.lookup(op)
        if hit is None or hit[1] != "exact":
            return ()
        return tuple(k for k in hit[0].kernels if not k.startswith(("Memset", "Memcpy")))

    def _measure_on_the_fly(self, op: OpCall, estimate: KernelEstimate) -> KernelEstimate:
        """Ask the profiler worker to measure an op no database has (profiler/onthefly.py Note
        [On-the-fly profiling]); the model's estimate stays if it cannot."""
        from phantora.profiler.rebuild import measurable
        try:
            if op in self._not_measured or not measurable(op):
                return estimate
        except TypeError:  # unhashable arguments: the worker could not key it either
            return estimate
        entry, reason = self.on_the_fly.measure(op)
        if entry is None:
            self._not_measured.add(op)
            self.warn_once(f"on-the-fly:{op.name}", f"on-the-fly profiling could not measure {op.name} ({reason}); "
                           f"it keeps its {estimate.source} estimate")
            return estimate
        return self.compute.add_measurement(op, entry)

    def host_only_op(self, name: str, *, allocates: bool) -> None:
        """An op that launches no kernel (a view, an allocation): only host time."""
        with self.lock:
            self.stats.host_only_ops += 1
            if not self._paid_by_price():
                self._charge(self.host.alloc_ns(name) if allocates else self.host.view_ns(name), "ops")

    def _paid_by_price(self) -> bool:
        """Whether the op being dispatched on this thread has its host cost in a priced library function's price
        (runtime/python_prices.py Note [Ops in a price]); counts it if so."""
        if self.op_in_price.value:
            self.stats.ops_in_library_python += 1
            return True
        return False

    def host_tensor_op(self, moved_bytes: int, new_outputs: list[int]) -> None:
        """An op on CPU tensors read and wrote `moved_bytes`, allocating `new_outputs` (their sizes): host time only
        (models/host.py Note [Tensor ops on the host])."""
        if not _main_thread_pays() or self._paid_by_price():
            return
        cost = self.host.cpu_tensor_op_ns(moved_bytes, new_outputs)
        if cost:
            self.host_work(cost, "host tensor ops")

    def tensor_from_python(self, elements: int) -> None:
        """A new CPU tensor stored `elements` Python numbers (models/host.py Note [Tensors from Python data]); only
        the program's main thread pays, as for `host_tensor_op`."""
        if _main_thread_pays() and not self._paid_by_price():
            self.host_work(self.host.python_data_ns(elements), "host tensor ops")

    def _count(self, estimate: KernelEstimate) -> None:
        stats = self.stats
        stats.kernels += 1
        stats.flops += estimate.flops
        stats.bytes_moved += estimate.bytes_moved
        stats.kernel_ns_by_class[estimate.kernel_class] += estimate.duration_ns
        stats.kernel_sources[estimate.source] += 1
        stats.kernel_ns_by_source[estimate.source] += estimate.duration_ns

    def _note_generic(self, op: OpCall) -> None:
        if self.config.strict:
            raise UnmodelledOpError(
                f"phantora: op {op.name} has no cost model (only a generic memory-bound estimate); "
                "rerun without --strict to accept the estimate, or add a measurement with `phantora profile`")
        self.stats.generic_ops[op.name] += 1

    # -- synchronisation ---------------------------------------------------------------------
    def synchronize_device(self, device: int) -> None:
        with self.lock:
            if all(key[0] == device for key in self._stream_ids):
                self.link.sync("device")  # the usual case: the rank's work is all on this device
            else:  # the coordinator sees one device per rank: wait for this device's streams one by one
                for key in sorted(k for k in self._stream_ids if k[0] == device):
                    self.link.sync("stream", stream_id=encode_stream(*key))
            self._charge(self.host.sync_ns(), "syncs")
            self.allocators[device].synchronize()

    def synchronize_stream(self, stream: StreamKey) -> None:
        with self.lock:
            self.wait_for_stream(stream)
            self._charge(self.host.sync_ns(), "syncs")

    def wait_for_stream(self, stream: StreamKey) -> None:
        """The host blocks until `stream`'s work so far is done (a blocking copy or `.item()`)."""
        with self.lock:
            self.link.sync("stream", stream_id=self.stream_id(stream))
            self.stream_reached(stream)

    def event_mark(self, stream: StreamKey) -> int:
        """Where the allocator stands as a CUDA event is recorded on `stream`: see `stream_reached`."""
        return self.allocators[stream[0]].event_mark

    def stream_reached(self, stream: StreamKey, mark: int | None = None) -> None:
        """The host learnt that `stream` finished its work so far (or up to an event recorded at `mark`): a
        sync, or a query that found it done. Blocks freed after `record_stream` on it before then become
        reusable at the next allocation, as the real allocator finds their events complete (models/memory.py
        Note [Cross-stream frees between syncs])."""
        self.allocators[stream[0]].stream_work_done(stream[1], until=mark)

    def finish(self) -> None:
        """The program ended: everything is sent to the coordinator."""
        self.link.finish()

    # -- warnings and placeholders -----------------------------------------------------------
    def warn_once(self, key: str, message: str) -> None:
        """Print a one-line warning the first time `key` occurs; the summary lists it."""
        if key in self._warned:
            return
        self._warned.add(key)
        self.stats.warnings.append(message)
        import sys
        print(f"phantora: warning: {message}", file=sys.stderr, flush=True)

    def note_placeholder(self, kind: str) -> None:
        self.stats.placeholders[kind] += 1


def describe_tensors(op: OpCall) -> str:
    """Input and output shapes for the trace: `bfloat16[8, 4096] bfloat16[4096, 4096] -> bfloat16[8, 4096]`."""
    def fmt(metas: list[TensorMeta] | tuple[TensorMeta, ...]) -> str:
        return " ".join(f"{m.dtype}{list(m.shape)}" for m in metas)
    return f"{fmt(op.tensor_inputs())} -> {fmt(op.outputs)}"

