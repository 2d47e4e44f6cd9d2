"""Op interception: CPU tensors stay real, CUDA work runs on fake tensors and is recorded.

Note: [Hybrid dispatch]
Two modes cooperate. `HybridMode`, a user TorchDispatchMode pushed for the whole run, sees
every op first and decides where it runs: ops that touch a fake tensor or ask for a CUDA device
go to `RecordingFakeMode` (a FakeTensorMode); everything else runs for real on the CPU, so data
loading, step counters and other host-side values are genuine. A few ops need a decision a fake
tensor cannot make — moving data between host and device, reading a value (`.item()`) — and have
handlers here. `RecordingFakeMode.dispatch` is the one place kernels are recorded: it is also
reached by ops on fake tensors that never passed through `HybridMode` (threads the mode was not
pushed on), and it counts only the outermost op, because decompositions it runs internally are
not separate kernels on a GPU.

Note: [Ops from tensor subclasses]
A tensor subclass with its own dispatch (DTensor) must unwrap before its op can be routed, so
`HybridMode` defers to it (NotImplemented). PyTorch then runs the subclass with the mode stack
popped, and the subclass's ops on its local fake tensors reach the fake tensors' own mode
directly, skipping `HybridMode`. `RecordingFakeMode.dispatch` therefore sends any op that did
not come through `HybridMode` back to it, so handlers (copies, reads, functional collectives)
apply to DTensor's local work as to any other. The subclass's own dispatch costs host time on a
GPU too (DTensor's sharding propagation and wrapping): the host pays it where `HybridMode` defers.
A functional collective's result (`AsyncCollectiveTensor`) is such a subclass with a lighter dispatch of
its own: it waits on its arguments, or re-wraps each output of a view op, so it is charged per op and per
output it wraps (`HostModel.async_collective_op_ns`) rather than as DTensor.

Note: [Host threads]
A program may issue GPU work from several host threads at once: TorchTitan's DualPipeV runs a
microbatch's forward and another's backward in two threads, which a GPU serves concurrently. A
FakeTensorMode keeps two things per mode that are per thread in nature: whether an op's kernel is
running (FakeTensor.device reads "meta" while it is, and dispatch asserts it is not) and the stack of its
`with` entries. Shared between threads, one thread's op made another's tensors read as meta and failed
its assertions; `RecordingFakeMode` keeps both per thread. The simulation's own state (the allocator
model, known values, the recorder) is then guarded by running ops on fake tensors one at a time in a
process (`RecordingFakeMode.one_op_at_a_time`, reentrant for an op's own inner ops). Each thread still
launches on its own current stream, so their kernels overlap on the simulated GPU as on a real one. A
thread that blocks inside an op (a synchronization) holds the others back as the session's lock already
does (runtime/engine_link.py).

Note: [Device queries]
A fake tensor's device is Python's to answer (its TensorImpl dispatches `prim.device`), and C++ asks often:
argument parsing, TensorIterator, the autograd engine, about 2.5 times per op in a training step. The query
reaches `HybridMode` first; it answers as FakeTensor's own handler does (`meta` inside a fake kernel, else
the fake device), without the op's locks and routing, where the query would only have been passed on.
While this mode is the top one, the native shim gives the same answer without entering Python dispatch
(Note [Device queries in C++] in csrc/device_queries.cpp); the queries that still arrive here are those
asked while another mode is on top (a program's own, or this one's handlers running an op).

Note: [Copying fake tensors]
`copy.deepcopy` of a module (a pipeline stage cut from a whole model, an EMA copy) deep-copies each
tensor's `__dict__`, and a FakeTensor's holds its fake mode: the copy would copy the whole simulated
device (the session with its lock and models; the lock cannot be pickled, which stopped TorchTitan's
pipeline split of Llama-3 8B, whose large buffers are fake CPU tensors, Note [Hybrid dispatch]). A
copied tensor stays on the one simulated device (`RecordingFakeMode.__deepcopy__`), as a copied CUDA
tensor stays on its GPU; its values are a clone, a device-to-device copy on the GPU as on a real one.

Note: [Foreign fake modes]
Library code computes metadata under its own FakeTensorMode: DTensor's sharding propagation, on a
cache miss, builds fake tensors of the *global* shapes (`OpSchema.gen_fake_args`, `empty_strided`
with a CUDA device) and runs the op on them. On a GPU nothing is allocated or launched. `HybridMode`
sits above any fake mode on the mode stack, so it sees those ops first; while a fake mode other
than ours is active it hands them straight to it, unrecorded. Recording them once cost an 8B model
under FSDP2 tens of GiB of phantom memory per optimizer op and a simulated OOM. An op on another fake mode's
tensors while that mode is not on the stack goes to that mode too: Dynamo, making its fake copy of a compiled
region's non-leaf input, runs an autograd op on the copy outside its mode (MetaConverter's `DelayedError`), and
the result must stay Dynamo's.
"""

from __future__ import annotations

import functools
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from phantora.models.compute import GEMM_OPS
from phantora.models.ops import OpCall, TensorMeta
from phantora.runtime import native
from phantora.runtime.cuda_checks import check_like_cuda
from phantora.runtime.dispatch_cache import CachedOp, DispatchCache, enabled_by_environment
from phantora.runtime.issuer import issued_from_python, issuing_frame
from phantora.runtime.memory_tracker import MemoryTracker
from phantora.runtime.session import CostedOp, Session
from phantora.runtime.shadows import makes_known_values, shadows

if TYPE_CHECKING:
    from phantora.runtime.python_prices import PricedCode

aten = torch.ops.aten
_FAKE_MODE_KEY = torch._C._TorchDispatchModeKey.FAKE

LARGE_HOST_FACTORY_NUMEL = 1 << 20
"""CPU factory results at least this big stay fake: a model built on the CPU and then moved to
the GPU must not cost real host memory (8B parameters would need 32 GB)."""

_ALLOCATIONS = {
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
    aten.new_empty.default, aten.new_empty_strided.default, aten.empty_permuted.default,
}
_METADATA_ONLY = {
    aten.lift_fresh.default, aten.detach.default, aten.alias.default, aten._unsafe_view.default,
    aten.resize_.default, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
    aten.set_.source_Storage,
}

_DEVICE = torch.ops.prim.device.default
_META = torch.device("meta")

_PASSTHROUGH = {
    _DEVICE, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten._has_compatible_shallow_copy_type.default,
}


def _returns_view(func: torch._ops.OpOverload) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


_view_cache: dict[Any, bool] = {}


def launches_no_kernel(func: torch._ops.OpOverload) -> bool:
    """Views and pure allocations: host work only, no kernel on the GPU."""
    cached = _view_cache.get(func)
    if cached is None:
        cached = func in _ALLOCATIONS or func in _METADATA_ONLY or _returns_view(func)
        _view_cache[func] = cached
    return cached


_RESIZING = {aten.resize_.default, aten.resize_as_.default, aten.set_.source_Storage_storage_offset,
             aten.set_.source_Tensor_storage_offset}
_resize_cache: dict[Any, bool] = {}


def resizes_outputs(func: torch._ops.OpOverload) -> bool:
    """`Tensor.resize_`, `resize_as_`, `set_` with a size, and `out=` overloads: on a GPU they
    reallocate an output storage that is too small (resize_bytes_cuda); memory_tracker Note
    [Fake storage sizes]."""
    cached = _resize_cache.get(func)
    if cached is None:
        cached = func in _RESIZING or any(a.is_out for a in func._schema.arguments)
        _resize_cache[func] = cached
    return cached


_DTYPE_NAMES = {d: str(d).removeprefix("torch.") for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.float8_e4m3fn,
    torch.float8_e5m2)}


def tensor_meta(t: torch.Tensor) -> TensorMeta:
    dtype = _DTYPE_NAMES.get(t.dtype) or str(t.dtype).removeprefix("torch.")
    return TensorMeta(tuple(t.shape), dtype, tuple(t.stride()), t.device.type, t.storage_offset())


def _plain(value: Any) -> Any:
    """A hashable, torch-free stand-in for one op argument."""
    if isinstance(value, torch.Tensor):
        return tensor_meta(value)
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return _DTYPE_NAMES.get(value) or str(value).removeprefix("torch.")
    return str(value)


def make_op_call(func: torch._ops.OpOverload, args: tuple, kwargs: dict, outputs: list[torch.Tensor]) -> OpCall:
    return OpCall(
        name=str(func),
        args=tuple(_plain(a) for a in args),
        kwargs=tuple(sorted((k, _plain(v)) for k, v in kwargs.items())),
        outputs=tuple(tensor_meta(o) for o in outputs),
    )


def _fake_cuda_index(tensors: list[FakeTensor]) -> int | None:
    """`_cuda_index` of fake tensors, outside a fake kernel (where their device is their fake device)."""
    for t in tensors:
        device = t._fake_device  # FakeTensor.fake_device, without the property's call
        if device.type == "cuda":
            return device.index or 0
    return None


def _cuda_index(tensors: list[torch.Tensor]) -> int | None:
    for t in tensors:
        if t.device.type == "cuda":
            return t.device.index or 0
    return None


_CUBLAS_OPS = frozenset(getattr(torch.ops.aten, name.split(".", 1)[1]) for name in GEMM_OPS)
"""The compute model's GEMM ops: PyTorch runs their CUDA kernels through a cuBLAS(Lt) handle
(runtime/memory_tracker.py Note [cuBLAS workspaces])."""


class OpTraits:
    """What the recorder asks of an op on every call, worked out once per op (an `OpOverload` hashes in Python:
    asking each question of the op itself cost more than the answers)."""

    __slots__ = ("name", "no_kernel", "allocates", "resizes", "cublas", "mutable", "makes_known_values")

    def __init__(self, func: torch._ops.OpOverload) -> None:
        self.name = str(func)
        self.no_kernel = launches_no_kernel(func)
        self.allocates = func in _ALLOCATIONS
        self.resizes = resizes_outputs(func)
        self.cublas = func.overloadpacket in _CUBLAS_OPS
        self.mutable = func._schema.is_mutable
        self.makes_known_values = makes_known_values(func)


_traits: dict[Any, OpTraits] = {}


def op_traits(func: torch._ops.OpOverload) -> OpTraits:
    traits = _traits.get(func)
    if traits is None:
        traits = _traits[func] = OpTraits(func)
    return traits


def issued_by_engine(node: Any) -> bool:
    """Whether the autograd engine itself issues the op running now (`node`: the autograd node running,
    `torch._C._current_autograd_node()`); inside a node with grad mode on, Python is recomputing a forward
    (activation checkpointing) or recording a graph, so its ops count as issued from Python, and so do the
    ops of the program's Python that the engine calls: a custom Function's backward, a hook (issuer.py
    Note [Python in the backward pass])."""
    return node is not None and not torch.is_grad_enabled() and not issued_from_python()

class KernelRecorder:
    """Turns ops on fake CUDA tensors into allocations and kernels of the session."""

    def __init__(self, session: Session, shim) -> None:
        self.session = session
        self.memory = MemoryTracker(session)
        self.memory.new_storage_listeners.append(shadows.drop)
        self._current_stream = shim.phantora_current_stream
        self._local = _RecorderLocal()
        self.unwaited = None
        """distributed.UnwaitedResults once the collectives backend is installed."""

    def suppress(self) -> "_Suppress":
        """Ops run inside this context are bookkeeping (e.g. shape inference), not GPU kernels."""
        return _Suppress(self._local)

    def current_stream_id(self, device: int) -> int:
        return self._current_stream(device)

    def record(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: Any,
               cached: CachedOp | None = None) -> None:
        """`cached`: the op's entry in the dispatch cache, which keeps what follows from its metadata alone
        (dispatch_cache.py Note [Replaying FakeTensorMode's cache])."""
        if self._local.suppress:
            return
        if cached is None:
            traits = op_traits(func)
        else:
            traits = cached.traits
            if traits is None:
                traits = cached.traits = op_traits(func)
        outputs = [out] if type(out) is FakeTensor else [o for o in _leaves(out) if isinstance(o, FakeTensor)]
        device = _fake_cuda_index(outputs)
        flat = None
        if device is None:
            flat = _arguments(args, kwargs)
            device = _cuda_index([a for a in flat if isinstance(a, torch.Tensor)])
            if device is None:  # work on fake *CPU* tensors: host-side, no GPU kernel
                if not traits.no_kernel:
                    self.session.host_tensor_op(*host_tensor_bytes(flat, out))
                return
        stream_id = self._current_stream(device)
        for o in outputs:
            if o._fake_device.type == "cuda":  # outside a fake kernel, a fake tensor's device
                self.memory.track_new_storage(o, stream_id, traits.resizes)
        node = torch._C._current_autograd_node()
        backward = node is not None and self._in_backward(node)
        if traits.cublas:
            self.cublas_workspace(node, device, stream_id)
        if traits.no_kernel:
            self.session.host_only_op(traits.name, allocates=traits.allocates)
            return
        shadowed = traits.makes_known_values or bool(shadows)  # whether the op could run on shadows
        if self.unwaited or shadowed:
            if flat is None:
                flat = _arguments(args, kwargs)
            inputs = [a for a in flat if isinstance(a, torch.Tensor)]
            propagated = shadowed and shadows.propagate(func, args, kwargs, inputs, out)
            self.before_kernel(inputs, written=inputs if traits.mutable and not propagated else ())
        self.session.launch_costed(self._cost(func, args, kwargs, outputs, cached), (device, stream_id),
                                   backward=backward)

    def cublas_workspace(self, node: Any, device: int, stream_id: int) -> None:
        """A cuBLAS GEMM runs (`node`: the autograd node running, if any): the engine's thread has its own cuBLAS
        handle, so its own workspace (memory_tracker.py Note [cuBLAS workspaces])."""
        self.memory.cublas_workspace("autograd" if node is not None else threading.get_ident(), device, stream_id)

    def _cost(self, func, args: tuple, kwargs: dict, outputs: list, cached: CachedOp | None) -> CostedOp:
        """The op's costs; kept in its dispatch-cache entry, if it has one, while costs cannot change."""
        if cached is not None and cached.costed is not None:
            return cached.costed
        costed = self.session.cost(make_op_call(func, args, kwargs, outputs))
        if cached is not None and cached.keyed_by_values and self.session.costs_are_fixed:
            cached.costed = costed
        return costed

    def _in_backward(self, node: Any) -> bool:
        """Whether the autograd engine itself issues the op being recorded (`issued_by_engine`; models/host.py:
        no Python around it); the host pays once for each node the engine runs. The last node is held so that `is`
        tells nodes apart: its Python wrapper lives as long as someone holds it (the last node of a
        backward is a leaf's AccumulateGrad, which holds nothing the parameter does not). `node`: the
        autograd node running now (`torch._C._current_autograd_node()`), None outside the backward."""
        if node is None:
            return False
        if node is not self._local.node:
            self._local.node = node
            self.session.host_work(self.session.host.autograd_node_ns(), "autograd nodes")
        return issued_by_engine(node)

    def before_kernel(self, inputs: list[torch.Tensor], written: Any = ()) -> None:
        """A kernel on `inputs` is about to launch: order it after NCCL results it uses
        (distributed Note [Unwaited NCCL results]); drop shadows of what it writes."""
        if self.unwaited:
            self.unwaited.wait_for(inputs)
        if written:
            shadows.forget(list(written))

    def launch(self, op: OpCall, device: int) -> tuple[int, int]:
        """Record a kernel that a handler issues itself (copies between host and device); returns its stream."""
        stream = (device, self.current_stream_id(device))
        self.session.launch_kernel(op, stream)
        return stream


class _Routed(threading.local):
    value = False
    """Whether `HybridMode` is routing an op on this thread."""


class _RecorderLocal(threading.local):
    """The recorder's per-thread state."""

    suppress = 0
    """How deep in `KernelRecorder.suppress` contexts the thread is."""
    node = None
    """The autograd node the thread last recorded an op of (`_in_backward`)."""


class _Suppress:
    def __init__(self, local: _RecorderLocal) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.suppress += 1

    def __exit__(self, *exc: object) -> None:
        self._local.suppress -= 1


class RecordingFakeMode(FakeTensorMode):
    """FakeTensorMode that reports each outermost op it executes to the recorder."""

    def __init__(self, recorder: KernelRecorder) -> None:
        self._per_thread = threading.local()
        super().__init__(allow_non_fake_inputs=True)
        self.recorder = recorder
        self._depth = threading.local()
        self.hybrid: HybridMode | None = None
        self.routed = _Routed()
        """`value` is True while HybridMode is routing an op on this thread."""
        self.one_op_at_a_time = threading.RLock()
        """Held while an op on fake tensors runs, whatever thread issued it (Note [Host threads])."""
        self.dispatch_cache = DispatchCache(self) if enabled_by_environment() else None
        """dispatch_cache.py Note [Replaying FakeTensorMode's cache]; None: every op takes FakeTensorMode's path."""

    def dispatch(self, func, types, args=(), kwargs=None):  # noqa: D401 - FakeTensorMode API
        with self.one_op_at_a_time:
            return self._dispatch(func, types, args, kwargs or {})

    def _dispatch(self, func, types, args: tuple, kwargs: dict):
        if func in _PASSTHROUGH or getattr(self._depth, "value", 0):
            return super().dispatch(func, types, args, kwargs)
        if self.hybrid is not None and not self.routed.value:
            return self.hybrid.__torch_dispatch__(func, types, args, kwargs)  # Note [Ops from tensor subclasses]
        check_like_cuda(func, args)  # Note [Checks of the CUDA kernels]
        self._depth.value = 1
        try:
            out = super().dispatch(func, types, args, kwargs)
        finally:
            self._depth.value = 0
        self.recorder.record(func, args, kwargs, out)
        return out

    def replay(self, cached: CachedOp, func, args: tuple, kwargs: dict) -> Any:
        """What `dispatch` does for an op whose FakeTensorMode cache entry is known, without the re-dispatch:
        the entry's outputs, recorded (dispatch_cache.py Note [Replaying FakeTensorMode's cache])."""
        with self.one_op_at_a_time:
            out = self.dispatch_cache.outputs(cached, func, args)
            if not getattr(self._depth, "value", 0):
                self.recorder.record(func, args, kwargs, out, cached)
            return out

    # FakeTensorMode's per-thread state, per thread (Note [Host threads])
    @property
    def in_kernel_invocation(self) -> bool:
        return getattr(self._per_thread, "in_kernel_invocation", False)

    @in_kernel_invocation.setter
    def in_kernel_invocation(self, value: bool) -> None:
        self._per_thread.in_kernel_invocation = value

    @property
    def enter_stack(self) -> list:
        stack = getattr(self._per_thread, "enter_stack", None)
        if stack is None:
            stack = self._per_thread.enter_stack = []
        return stack

    @enter_stack.setter
    def enter_stack(self, value: list) -> None:
        self._per_thread.enter_stack = value

    def __deepcopy__(self, memo: dict) -> "RecordingFakeMode":
        """Note [Copying fake tensors]: the mode is the process's simulated device, never copied."""
        return self


def _is_foreign(a: Any) -> bool:
    """A real (CPU or meta) tensor that is not a scalar, handed to an op on fake tensors."""
    return isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) and (a.dim() > 0 or a.is_meta)


def _wants_cuda(kwargs: dict, flat_args: list) -> bool:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type == "cuda":
        return True
    return any(isinstance(a, torch.device) and a.type == "cuda" for a in flat_args)


_own_dispatch: dict[type, bool] = {}


def _has_own_dispatch(cls: type) -> bool:
    """A tensor subclass with its own `__torch_dispatch__` (DTensor, ...), other than fake tensors."""
    known = _own_dispatch.get(cls)
    if known is None:
        known = (issubclass(cls, torch.Tensor) and not issubclass(cls, FakeTensor)
                 and cls.__torch_dispatch__ is not torch._C._disabled_torch_dispatch_impl)
        _own_dispatch[cls] = known
    return known


@functools.cache
def _is_async_collective(cls: type) -> bool:
    """A functional collective's not-yet-waited result (torch.distributed._functional_collectives)."""
    return cls.__name__ == "AsyncCollectiveTensor" and cls.__module__.endswith("_functional_collectives")


@functools.cache
def _is_view(func) -> bool:
    """Whether AsyncCollectiveTensor's dispatch takes `func` for a view op (wraps its outputs, waits on nothing)."""
    try:
        from torch.distributed._functional_collectives import _is_view_op
    except ImportError:  # its test, for a torch that moves it
        first = func._schema.arguments[:1]
        return bool(first) and first[0].alias_info is not None and not first[0].alias_info.is_write
    return _is_view_op(func)


def _async_collective_work(func, args: tuple, kwargs: dict) -> tuple[int, bool]:
    """What AsyncCollectiveTensor's dispatch does for `func`: (outputs it wraps, whether it maps the arguments
    through pytree). `aten.view` takes its fast path: one wrapper, no maps."""
    if func is torch.ops.aten.view.default:
        return 1, False
    return (_view_outputs(func, args, kwargs) if _is_view(func) else 0), True


def _view_outputs(func, args: tuple, kwargs: dict) -> int:
    """How many tensors a view op returns: one, or the pieces of a split or unbind."""
    name = func.__name__.split(".")[0]
    if name == "split_with_sizes":
        return len(args[1])
    if name == "split":
        size = args[0].shape[kwargs.get("dim", args[2] if len(args) > 2 else 0)]
        return -(-size // args[1])
    if name == "unbind":
        return args[0].shape[kwargs.get("dim", args[1] if len(args) > 1 else 0)]
    return 1


Handler = Callable[["HybridMode", Any, tuple, dict], Any]


class _Route:
    """What `HybridMode` asks of an op on every call, kept by the op's `id`: an `OpOverload` hashes in Python
    (`hash(self._op)`), so a set or dict lookup by the op costs a Python call each."""

    __slots__ = ("func", "passthrough", "handler", "moves_memory", "lifts_python_data")

    def __init__(self, func: Any, handler: Handler | None) -> None:
        self.func = func
        """Held, so that no other op takes its `id` while this entry lives."""
        self.passthrough = func in _PASSTHROUGH
        self.handler = handler
        self.moves_memory = type(func) is torch._ops.OpOverload and not op_traits(func).no_kernel
        """Whether the op, on CPU tensors, reads or writes memory the host pays for (not a view or metadata op)."""
        self.lifts_python_data = func is aten.lift_fresh.default
        """Whether the op ends the building of a tensor from Python data (models/host.py Note [Tensors from Python
        data])."""


class HybridMode(TorchDispatchMode):
    """Routes each op to the real CPU or to the recording fake mode; see Note [Hybrid dispatch]."""

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No: TorchDispatchMode would wrap `__torch_dispatch__` in `torch._disable_dynamo`, which keeps dynamo
        from compiling the mode's frames at a cost on every op; Phantora's files are in Dynamo's skip list instead
        (runtime/compile.py Note [torch.compile under Phantora])."""
        return False

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Dynamo may compile while the mode is active (runtime/compile.py Note [torch.compile under Phantora])."""
        return True

    def __init__(self, fake_mode: RecordingFakeMode, handlers: dict[Any, Handler],
                 priced: PricedCode | None = None) -> None:
        """`priced`: the library code whose prices hold the ops it issues by operator syntax (runtime/python_prices.py
        Note [Ops in a price]); None without library prices."""
        super().__init__()
        self.fake_mode = fake_mode
        fake_mode.hybrid = self
        self.recorder = fake_mode.recorder
        self.session = fake_mode.recorder.session
        self._handlers = handlers
        self._routes: dict[int, _Route] = {}
        """id(op) -> what routing needs of the op, worked out at its first call (`_Route`)."""
        self._priced = priced

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _DEVICE and type(args[0]) is FakeTensor:  # Note [Device queries]
            return _META if args[0].fake_mode.in_kernel_invocation else args[0]._fake_device
        local = self.fake_mode.routed
        with self.fake_mode.one_op_at_a_time:  # Note [Host threads]
            outer, local.value = local.value, True
            priced = self._priced is not None and not outer and self._issued_in_price(sys._getframe().f_back)
            if priced:
                self.session.op_in_price.value = True
            try:
                return self._route(func, types, args, kwargs or {})
            finally:
                local.value = outer
                if priced:
                    self.session.op_in_price.value = False

    def _issued_in_price(self, frame: FrameType | None) -> bool:
        """Whether the op `frame` dispatches runs inside a priced library function's own time (runtime/python_prices.py
        Note [Ops in a price])."""
        issuer = issuing_frame(frame)
        return issuer is not None and self._priced.holds_op_issued_by(issuer)

    def _route(self, func, types, args: tuple, kwargs: dict):
        route = self._routes.get(id(func))
        if route is None or route.func is not func:
            route = self._routes[id(func)] = _Route(func, self._handlers.get(func))
        if route.passthrough:
            return func(*args, **kwargs)
        active_fake = torch._C._get_dispatch_mode(_FAKE_MODE_KEY)
        if active_fake is not None and active_fake is not self.fake_mode:
            return func(*args, **kwargs)  # Note [Foreign fake modes]
        flat = _arguments(args, kwargs)
        subclasses, has_fake, has_foreign, other_mode = [], False, False, None
        own = self.fake_mode
        for a in flat:
            if isinstance(a, torch.Tensor):
                kind = type(a)
                if kind is FakeTensor or (isinstance(a, FakeTensor) and not _has_own_dispatch(kind)):
                    has_fake = True
                    if a.fake_mode is not own:
                        other_mode = a.fake_mode
                elif _has_own_dispatch(kind):
                    subclasses.append(kind)
                elif not has_foreign:
                    has_foreign = _is_foreign(a)
        if other_mode is not None:  # another fake mode's tensors, its mode not on the stack
            with other_mode:
                return func(*args, **kwargs)  # Note [Foreign fake modes]
        if subclasses:
            if all(_is_async_collective(cls) for cls in subclasses):
                self.session.async_collective_op(*_async_collective_work(func, args, kwargs))
            else:
                self.session.subclass_op(len(subclasses), backward=issued_by_engine(torch._C._current_autograd_node()))
            return NotImplemented  # Note [Ops from tensor subclasses]
        if not has_fake and not _wants_cuda(kwargs, flat):
            if any(isinstance(a, torch.Tensor) for a in flat):
                return self._real_cpu_op(route, args, kwargs, flat)
            return self._factory(route, args, kwargs)
        handler = route.handler
        if handler is not None:
            return handler(self, func, args, kwargs)
        if has_foreign:
            args, kwargs = self._fake_foreign_inputs(args, kwargs)
        return self._run_fake_mode(func, args, kwargs)

    def _real_cpu_op(self, route: _Route, args: tuple, kwargs: dict, flat: list) -> Any:
        """An op on real CPU tensors runs for real; the host pays for the memory it moves, and a tensor built from
        Python data for its elements (models/host.py Note [Tensors from Python data])."""
        out = route.func(*args, **kwargs)
        if route.moves_memory:
            self.session.host_tensor_op(*host_tensor_bytes(flat, out))
        elif route.lifts_python_data and out.untyped_storage().resizable():
            self.session.tensor_from_python(out.numel())  # not a numpy array's memory: torch stored each element
        return out

    def _fake_foreign_inputs(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        flat, spec = tree_flatten((args, kwargs))
        return tree_unflatten([self._fake_like(a) if _is_foreign(a) else a for a in flat], spec)

    def run_fake(self, func, args: tuple, kwargs: dict) -> Any:
        """Run `func` under the recording fake mode, real (CPU or meta) inputs made fake first."""
        if any(_is_foreign(a) for a in _arguments(args, kwargs)):
            args, kwargs = self._fake_foreign_inputs(args, kwargs)
        return self._run_fake_mode(func, args, kwargs)

    def _run_fake_mode(self, func, args: tuple, kwargs: dict) -> Any:
        """Run `func` under the recording fake mode, or replay it from the dispatch cache (dispatch_cache.py
        Note [Replaying FakeTensorMode's cache])."""
        cache = self.fake_mode.dispatch_cache
        if cache is None or type(func) is not torch._ops.OpOverload:
            return self._through_fake_mode(func, args, kwargs)
        key = cache.key(func, args, kwargs)
        if key is None:
            return self._through_fake_mode(func, args, kwargs)
        cached = cache.lookup(key)
        if cached is not None:
            return self.fake_mode.replay(cached, func, args, kwargs)
        if cache.knows(key):  # FakeTensorMode does not cache this call
            return self._through_fake_mode(func, args, kwargs)
        fake_mode_key = cache.fake_mode_key(func, args, kwargs)
        out = self._through_fake_mode(func, args, kwargs)
        cache.learn(key, fake_mode_key, func, args, kwargs, out)
        return out

    def _through_fake_mode(self, func, args: tuple, kwargs: dict) -> Any:
        try:
            with self.fake_mode:
                return func(*args, **kwargs)
        except DynamicOutputShapeException:
            out = self._run_on_known_values(func, args, kwargs)
            if out is not None:
                return out
            raise NotImplementedError(
                f"phantora: {func} has a data-dependent output shape and its inputs' values are not known "
                "(docs/runtime.md, Values)") from None
        except DataDependentOutputException:
            raise NotImplementedError(
                f"phantora: {func} reads tensor values on the GPU, which is not supported yet") from None
        except UnsupportedOperatorException:
            raise NotImplementedError(
                f"phantora: operator {func} has no fake (meta) implementation, so it cannot be simulated; "
                "register one with torch.library.register_fake") from None

    def _run_on_known_values(self, func, args: tuple, kwargs: dict) -> Any:
        """An op whose output shape depends on its inputs' values (`nonzero`, `masked_select`, `unique`), all of
        them known (Note [Shadow values]): it runs on the host, and its outputs are fake tensors of the real
        results' shapes, recorded as the op's kernel; as on a GPU, the host waits to learn the size. None if
        some input's values are not known."""
        real = shadows.real_result(func, args, kwargs)
        if real is None:
            real = _selected_by_known_mask(func, args, kwargs)
        if real is None:
            return None
        flat_in = tree_flatten((args, kwargs))[0]
        device = next(a.device for a in flat_in if isinstance(a, FakeTensor))
        flat_out, spec = tree_flatten(real)
        with self.recorder.suppress(), self.fake_mode:
            fakes = [torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device=device)
                     if isinstance(r, torch.Tensor) else r for r in flat_out]
        out = tree_unflatten(fakes, spec)
        self.recorder.record(func, args, kwargs, out)
        if device.type == "cuda":
            index = device.index or 0
            self.session.wait_for_stream((index, self.recorder.current_stream_id(index)))
        return out

    def _fake_like(self, t: torch.Tensor) -> FakeTensor:
        """A fresh fake tensor with `t`'s metadata (its values do not matter where it is used).

        Not `FakeTensorMode.from_real_tensor`: its memo keeps a weak reference to `t`, and a
        module parameter with a weak reference cannot be swapped (Note [Moving modules to cuda])."""
        with self.recorder.suppress(), self.fake_mode:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)

    def _factory(self, route: _Route, args: tuple, kwargs: dict) -> Any:
        """A CPU factory: real if small, fake if large (see LARGE_HOST_FACTORY_NUMEL). Where its size is not in its
        arguments, the fake run tells it."""
        func = route.func
        size = _factory_size(func, args, kwargs)
        if size is not None and all(isinstance(d, int) for d in size) and _numel(size) < LARGE_HOST_FACTORY_NUMEL:
            return self._real_cpu_op(route, args, kwargs, [])
        with self.recorder.suppress():
            out = self.run_fake(func, args, kwargs)
        if isinstance(out, torch.Tensor) and out.numel() >= LARGE_HOST_FACTORY_NUMEL:
            if route.moves_memory:
                self.session.host_tensor_op(*host_tensor_bytes([], out))
            return out
        return self._real_cpu_op(route, args, kwargs, [])


def _factory_size(func, args: tuple, kwargs: dict) -> list | tuple | None:
    """The size a factory's result will have: its first argument if that is a list, else its `size` argument
    (`randint(low, high, size)`, which a data loader calls for every sample), None if neither."""
    if args and isinstance(args[0], (list, tuple)):
        return args[0]
    index = _size_index(func)
    if index is None:
        return None
    size = args[index] if index < len(args) else kwargs.get("size")
    return size if isinstance(size, (list, tuple)) else None


@functools.cache
def _size_index(func) -> int | None:
    """Where a factory's `size` argument is in its schema, None if it has none."""
    schema = getattr(func, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    return names.index("size") if "size" in names else None


def _selected_by_known_mask(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """`masked_select` of unknown values by a known mask (Megatron's router probabilities picked by its routing
    map): the result's size is the mask's count, its values unknown; a stand-in of that size (meta, no data)."""
    if func is not aten.masked_select.default:
        return None
    source = args[0]
    mask = args[1] if len(args) > 1 else kwargs.get("mask")
    known = shadows.lookup(mask, synced=False) if isinstance(mask, FakeTensor) else None
    if known is None:
        return None
    with torch._C._DisableTorchDispatch():
        count = int(known.expand(torch.broadcast_shapes(source.shape, mask.shape)).sum())
        return torch.empty(count, dtype=source.dtype, device="meta")


def host_tensor_bytes(inputs: list, out: Any) -> tuple[int, list[int]]:
    """(bytes read and written, sizes of the new outputs) of an op on CPU tensors (models/host.py Note [Tensor ops on
    the host]): every host tensor argument read once, every output that is not an argument written once (an in-place
    op's result is its argument). Meta tensors (a model built on the meta device) hold no memory to move."""
    read = {id(a): _nbytes(a) for a in inputs if _on_host(a)}
    new = [_nbytes(o) for o in _leaves(out) if _on_host(o) and id(o) not in read]
    return sum(read.values()) + sum(new), new


def _on_host(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "cpu"


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _leaves(value: Any) -> list:
    """`tree_flatten(value)[0]`, faster for what ops take and return: tensors and scalars in lists and tuples."""
    found: list = []
    _collect(value, found)
    return found


def _arguments(args: tuple, kwargs: dict) -> list:
    """`_leaves((args, kwargs))`, without its calls for the two containers every op has."""
    found: list = []
    for v in args:
        if type(v) in _LEAVES or isinstance(v, torch.Tensor):
            found.append(v)
        else:
            _collect(v, found)
    if kwargs:
        _collect(kwargs, found)
    return found


_SEQUENCES = frozenset({tuple, list, torch.Size})
_LEAVES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})
"""Types `tree_flatten` takes as leaves (with tensors)."""


def _collect(value: Any, found: list) -> None:
    """Append `value`'s leaves to `found` (what pytree does not know as a leaf or a sequence: through pytree)."""
    kind = type(value)
    if kind in _SEQUENCES:
        for v in value:
            if type(v) in _LEAVES or isinstance(v, torch.Tensor):
                found.append(v)
            else:
                _collect(v, found)
    elif kind in _LEAVES or isinstance(value, torch.Tensor):
        found.append(value)
    elif kind is dict:
        for v in value.values():
            _collect(v, found)
    else:
        found.extend(tree_flatten(value)[0])


def _numel(size) -> int:
    n = 1
    for d in size:
        n *= d
    return n
