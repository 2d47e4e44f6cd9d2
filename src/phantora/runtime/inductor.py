"""The kernels TorchInductor would generate for a compiled graph, costed on the simulated GPU.

Note: [Simulated Inductor]
`torch.compile`'s default backend is TorchInductor. Under Phantora the backend is Inductor's own `compile_fx`,
run as far as its scheduler and no further (`SimulatedInductor`):

- Dynamo traces the region with its fake tensors, as on a GPU; `compile_fx` runs Inductor's pre-grad passes,
  AOTAutograd with Inductor's decompositions and its min-cut partitioner (which decides the activations the
  forward saves for the backward), and hands each graph (the forward, and at the first backward the backward)
  to an inner compiler. Phantora's (`lower_and_plan`) does what Inductor's does up to code generation: the
  post-grad passes, lowering (`GraphLowering.run`) and the scheduler, whose fusion decisions are Inductor's
  own. Nothing is generated or compiled: no Triton, no GPU, no driver.
- Each scheduled node becomes one step of a `KernelPlan`: a fused pointwise or reduction kernel (a
  `SchedulerNode` or `FusedSchedulerNode`) is an `inductor.pointwise` / `inductor.reduction` op reading and
  writing the bytes Inductor counts for it (`get_read_write_buffer_accesses`: each buffer the kernel loads or
  stores, buffers fused away excluded), costed by the compute model as a memory-bound kernel of its class
  (models/compute.py `GENERATED_KERNELS`); an extern kernel (cuBLAS GEMMs, attention, other ATen fallbacks) is
  the ATen op it calls, costed as the eager op is (measured database, GEMM and attention models).
  Nop nodes and the `MultiOutput` views of a multi-output kernel launch nothing.
- When the compiled graph runs, the host pays for the call (`HostModel.compiled_call_ns`: guards, AOTAutograd's
  wrappers, per tensor input) and the plan is replayed: its kernels go on the current stream in the scheduler's
  order, each charging the host one launch from the generated code (`HostModel.compiled_launch_ns`: Inductor's
  wrapper calls the Triton launcher directly, without PyTorch's per-op dispatch), and the buffers Inductor allocates
  are allocated in the caching-allocator model when first written and freed after their last use (the
  scheduler's `last_usage`). The graph's results (among them, in a training forward, the activations the
  partitioner saves) are real fake tensors: the graph is also run eagerly on the fake tensors, unrecorded, for
  their metadata, and each result's storage is allocated where the plan writes it.

Note: [Inductor's memory in a plan]
A plan allocates and frees what Inductor's generated code does, two ways beyond each buffer's own lifetime:
- A fused kernel may write its result over a buffer it reads at that buffer's last use, of the same size and
  dtype (`config.inplace_buffers`): the result takes no block of its own. Which kernels do is Inductor's own
  decision (`SchedulerNode.decide_inplace_update`), taken while planning as its code generation takes it (inside a
  kernel, node by node in schedule order, with the nodes before it completed). The replay frees the dying buffer
  before it allocates the result, and the caching allocator hands the same block back.
- The generated code steals its inputs (`args.clear()`) and deletes each at its last use, so a backward graph frees
  each activation the forward saved as soon as it has read it (AOTAutograd keeps no other reference). The replay
  drops its reference to each input at its last use; an input the program still holds (a parameter, a batch)
  stays allocated, as on the GPU.
Without them a compiled nanoGPT 124M held a second [16, 1024, 50304] logits-sized buffer at its peak: 10.0 GiB
allocated against 8.45 measured; with them 8.44. `benchmarks/memory/compiled_graph_memory.py` reproduces a real
H200's peaks exactly (data/h200/memory/compiled_graphs/).

What cannot be planned falls back to eager for the region, loudly (`eager_fallback`): the region's ops are then
recorded one by one, as without compilation, and the summary counts the fallbacks and names why. So does a graph
with dynamic shapes called with other shapes than those its plan was made for (`PlannedGraph._run_unplanned`).
Compilation time itself is not predicted (the summary says so).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten

from phantora.models.compute import DTYPE_BYTES, GEMM_OPS
from phantora.models.ops import OpCall, TensorMeta
from phantora.runtime.dispatch import _plain, launches_no_kernel, make_op_call

if TYPE_CHECKING:
    from phantora.runtime.dispatch import KernelRecorder
    from phantora.runtime.session import Session

aten = torch.ops.aten


class CannotPlan(Exception):
    """A compiled graph that Phantora cannot turn into Inductor's kernels (the reason is the message)."""


@dataclass(frozen=True)
class PlannedBuffer:
    """A buffer Inductor allocates: `output` is its index among the graph's results, None for a temporary;
    `reuses`: the buffer (a temporary or a graph input) at its last use whose memory the kernel writes this one
    into, in place (Note [Inductor's memory in a plan])."""

    name: str
    nbytes: int
    output: int | None = None
    reuses: str | None = None


@dataclass(frozen=True)
class PlannedKernel:
    """One kernel of the generated program, in launch order, with the buffers it brings to life and ends, and the
    graph inputs (by position) whose last use it is."""

    op: OpCall
    allocates: tuple[PlannedBuffer, ...]
    frees: tuple[str, ...]
    releases: tuple[int, ...] = ()


@dataclass(frozen=True)
class KernelPlan:
    """A compiled graph as the GPU sees it."""

    kernels: tuple[PlannedKernel, ...]
    backward: bool
    inputs: tuple[str, ...] = ()
    """The graph inputs' names, by position."""


# ----------------------------------------------------------------------------- from Inductor's scheduler

_MM_EXTERNS = {f"extern_kernels.{p.split('.', 1)[1]}": f"{p}.default" for p in GEMM_OPS}
"""Inductor's cuBLAS calls (`extern_kernels.mm`, ...) and the ATen overloads they are."""
_CUBLAS_CALLS = frozenset(_MM_EXTERNS.values())


def _hint(expr: Any) -> int:
    from torch._inductor.virtualized import V

    return int(V.graph.sizevars.optimization_hint(expr, fallback=1)) if not isinstance(expr, int) else expr


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _ir_meta(node: Any) -> TensorMeta:
    """A TensorMeta of an Inductor IR buffer or view (its layout: sizes, strides, dtype, offset)."""
    layout = node.get_layout()
    return TensorMeta(tuple(_hint(s) for s in layout.size), _dtype_name(layout.dtype),
                      tuple(_hint(s) for s in layout.stride), "cuda", _hint(layout.offset))


def _val_meta(value: Any) -> Any:
    """An fx node's `meta["val"]`, tensors as TensorMeta (the way `dispatch.make_op_call` sees an argument)."""
    return _plain(value)


def _fx_value(arg: Any) -> Any:
    """An fx argument with nodes replaced by their example values."""
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_fx_value(a) for a in arg)
    return arg


def _extern_op(node: Any) -> OpCall:
    """The ATen call an extern kernel node makes, for the compute model."""
    ir_node = node.node
    kernel = getattr(ir_node, "python_kernel_name", None) or ""
    if kernel in _MM_EXTERNS:
        inputs = tuple(_ir_meta(i) for i in ir_node.inputs)
        return OpCall(_MM_EXTERNS[kernel], inputs, (), (_ir_meta(ir_node),))
    overload = getattr(ir_node, "op_overload", None)
    origin = next((n for n in sorted(getattr(ir_node, "origins", ()), key=lambda n: n.name)
                   if n.target is overload), None) if overload is not None else None
    if origin is None:
        raise CannotPlan(f"Inductor's extern kernel {kernel or type(ir_node).__name__} has no ATen op to cost")
    if overload.namespace in ("_c10d_functional", "c10d", "_dtensor"):
        raise CannotPlan(f"the graph has a collective ({overload}), which compiled regions do not simulate yet")
    args = tuple(_val_meta(_fx_value(a)) for a in origin.args)
    kwargs = tuple(sorted((k, _val_meta(_fx_value(v))) for k, v in origin.kwargs.items()))
    outputs = tuple(_val_meta(v) for v in tree_flatten(origin.meta.get("val"))[0] if isinstance(v, torch.Tensor))
    return OpCall(str(overload), args, kwargs, outputs)


def _generated_op(node: Any) -> OpCall:
    """A fused Triton kernel: the bytes Inductor counts it reads and writes, one flat tensor per buffer."""
    from torch._inductor.virtualized import V

    def flat(accesses: dict[str, int]) -> tuple[TensorMeta, ...]:
        metas = []
        for name, nbytes in sorted(accesses.items()):
            dtype = _dtype_name(V.graph.get_dtype(name))
            metas.append(TensorMeta((nbytes // DTYPE_BYTES.get(dtype, 4),), dtype, (1,)))
        return tuple(metas)

    reads = flat(node.get_read_write_buffer_accesses(include_reads=True, include_writes=False))
    writes = flat(node.get_read_write_buffer_accesses(include_reads=False, include_writes=True))
    kind = "inductor.reduction" if node.is_reduction() else "inductor.pointwise"
    return OpCall(kind, reads, (), writes)


def _kernel_op(node: Any) -> OpCall | None:
    """The op one scheduled node launches; None for nodes that launch nothing."""
    from torch._inductor import ir
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode

    if isinstance(node, NopKernelSchedulerNode):
        return None
    if isinstance(node, ExternKernelSchedulerNode):
        overload = getattr(node.node, "op_overload", None)
        if isinstance(node.node, ir.MultiOutput) or (isinstance(overload, torch._ops.OpOverload)
                                                     and launches_no_kernel(overload)):
            return None  # a view of a multi-output kernel's results, an ATen view or allocation called as a fallback
        return _extern_op(node)
    if node.is_template():
        raise CannotPlan("Inductor chose a Triton template kernel, which Phantora does not cost yet")
    return _generated_op(node)


def _output_indices() -> dict[str, int]:
    """Buffer name -> index among the graph's results, for results that are buffers of the graph."""
    from torch._inductor.virtualized import V

    found: dict[str, int] = {}
    for i, out in enumerate(V.graph.graph_outputs or ()):
        try:
            found.setdefault(out.get_name(), i)
        except (AttributeError, NotImplementedError):
            continue
    return found


def _buffer_bytes(buffer: Any) -> int:
    layout = buffer.node.get_layout()
    return _hint(layout.storage_size()) * layout.dtype.itemsize if hasattr(layout, "storage_size") else 0


def plan_from_scheduler(scheduler: Any, backward: bool) -> KernelPlan:
    """Inductor's scheduled nodes as kernels and buffer lifetimes (Note [Simulated Inductor], Note [Inductor's
    memory in a plan])."""
    from torch._inductor.virtualized import V

    scheduler.compute_last_usage()
    outputs = _output_indices()
    inputs = {name: i for i, name in enumerate(V.graph.graph_inputs)}
    removed = V.graph.removed_buffers
    kernels, planned = [], {}
    for node in scheduler.nodes:
        op = _kernel_op(node)
        in_place = _in_place_writes(scheduler, node)
        allocates = []
        for buffer in node.get_outputs():
            name = buffer.get_name()
            if name in removed or name in planned or not _allocates(buffer):
                continue
            planned[name] = PlannedBuffer(name, _buffer_bytes(buffer), outputs.get(name), in_place.get(name))
            allocates.append(planned[name])
        reused = set(in_place.values())
        frees = tuple(n for n in sorted(node.last_usage) if n in planned and planned[n].output is None
                      and n not in inputs and n not in reused)
        releases = tuple(sorted(inputs[n] for n in node.last_usage if n in inputs and n not in reused))
        if op is None:
            if allocates or frees or releases:  # a nop node's buffers: carried by the next kernel's step
                kernels.append(PlannedKernel(OpCall("inductor.nop", (), (), ()), tuple(allocates), frees, releases))
            continue
        kernels.append(PlannedKernel(op, tuple(allocates), frees, releases))
    return KernelPlan(tuple(kernels), backward, tuple(inputs))


def _in_place_writes(scheduler: Any, node: Any) -> dict[str, str]:
    """The buffers a scheduled node writes in place of a buffer it reads at that buffer's last use (output name ->
    input name): Inductor's own decision (`decide_inplace_update`), taken as its code generation takes it, inside a
    kernel, in schedule order."""
    from torch._inductor.codegen.common import Kernel
    from torch._inductor.scheduler import SchedulerNode
    from torch._inductor.virtualized import V

    decided: dict[str, str] = {}
    if any(isinstance(n, SchedulerNode) for n in node.get_nodes()):
        kernel = Kernel(increase_kernel_count=False)
        with V.set_kernel_handler(kernel):
            for inner in node.get_nodes():
                if isinstance(inner, SchedulerNode):
                    inner.decide_inplace_update()
        decided = dict(kernel.inplace_update_buffers)
    scheduler.completed_operations.update(node.get_operation_names())
    return decided


def _allocates(buffer: Any) -> bool:
    """Whether a scheduler buffer is memory of its own (not a mutation of another, not a view or a NoneLayout)."""
    from torch._inductor import ir

    node = buffer.node
    layout = getattr(node, "layout", None)
    if isinstance(node, ir.MutationOutput) or isinstance(layout, (ir.NoneLayout, ir.MultiOutputLayout)):
        return False
    return not node.get_mutation_names() and not isinstance(layout, ir.NonOwningLayout)


def lower_and_plan(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, is_inference: bool,
                   is_backward: bool, graph_id: int | None) -> KernelPlan:
    """What Inductor's `compile_fx_inner` and `fx_codegen_and_compile` do before code generation, then the plan
    of its schedule."""
    from torch._inductor.debug import DebugContext

    with DebugContext():
        return _lower_and_plan(gm, example_inputs, is_inference, is_backward, graph_id)


def _lower_and_plan(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], is_inference: bool, is_backward: bool,
                    graph_id: int | None) -> KernelPlan:
    from torch._inductor import compile_fx as cfx
    from torch._inductor.fx_passes.post_grad import view_to_reshape
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    shape_env = getattr(gm, "shape_env", None)
    if shape_env is None:
        shape_env = cfx.shape_env_from_inputs(example_inputs)
    view_to_reshape(gm)
    with torch.no_grad():
        fake_mode = cfx.fake_tensor_prop(gm, example_inputs)
    cfx._recursive_record_original_output_strides(gm)
    with V.set_fake_mode(fake_mode):
        cfx._recursive_post_grad_passes(gm, is_inference=is_inference)
        graph = GraphLowering(gm, example_inputs=example_inputs, shape_env=shape_env, graph_id=graph_id,
                              is_inference=is_inference, is_backward=is_backward)
        graph.freeze_runtime_asserts()
        with V.set_graph_handler(graph), V.set_extern_kernel_nodes([]):
            graph.run(*example_inputs)
            graph.init_wrapper_code()
            graph._update_scheduler()
            return plan_from_scheduler(graph.scheduler, is_backward)


# ----------------------------------------------------------------------------- running a plan


def runnable_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of the graph as AOTAutograd hands it over (plain ATen ops), before Inductor's passes rewrite it."""
    graph = torch.fx.Graph()
    result = graph.graph_copy(gm.graph, {})
    graph.output(result)
    return torch.fx.GraphModule(gm, graph)


class PlannedGraph:
    """What the simulated Inductor returns for one graph: called with the graph's inputs (boxed), it gives the
    results and puts the plan's kernels and buffers on the simulated GPU."""

    def __init__(self, plan: KernelPlan, eager: torch.fx.GraphModule, recorder: KernelRecorder,
                 planned_shapes: tuple, graphed_copies: tuple[int, ...] | None = None) -> None:
        self._boxed_call = True
        """Called with one list of inputs (AOTAutograd's convention; on the instance, so that wrappers copy it)."""
        self.plan = plan
        self.eager = eager
        self.recorder = recorder
        self.planned_shapes = planned_shapes
        """The inputs' shapes the plan's sizes are for (`input_shapes`); a graph with dynamic shapes called with
        others runs its ops eagerly (`_run_unplanned`)."""
        self.graphed_copies = graphed_copies
        """With `mode="reduce-overhead"`: the inputs CUDA graph trees copy into the graph's static inputs before each
        replay (runtime/cuda_graphs.py Note [Simulated CUDA graphs]); None: the kernels are launched one by one."""
        self._input_positions = {name: i for i, name in enumerate(plan.inputs)}
        """A graph input's name -> its position among the graph's arguments."""
        self._launch_ns: list[int] | None = None
        """Each plan kernel's host cost of its launch from the generated code (the host model is the session's, fixed):
        worked out at the first replay, not at every call."""

    def __call__(self, args: list) -> list:
        if input_shapes(args) != self.planned_shapes:
            return self._run_unplanned(args)
        with self.recorder.suppress():  # `forward`, not the module's call: compiled code calls no nn.Module
            results = self.eager.forward(*args)
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        held = list(args)
        args.clear()  # the generated code steals its inputs: each dies at its last use unless the caller holds it
        tensors = _fakes(held)
        device = next((t.fake_device.index or 0 for t in itertools.chain(tensors, _fakes(results))
                       if t.fake_device.type == "cuda"), None)
        if device is not None:
            session = self.recorder.session
            session.host_work(session.host.compiled_call_ns(len(tensors)), "compiled graphs")
            copies = [held[i] for i in self.graphed_copies or () if isinstance(held[i], FakeTensor)]
            del tensors
            self._replay(device, held, results, copies)
        return results

    def _run_unplanned(self, args: list) -> list:
        """A graph with dynamic shapes, called with shapes other than those it was planned for: its ATen ops run and
        are costed one by one, loudly (the plan's sizes are not this call's)."""
        why = "a dynamic-shape graph called with other shapes than it was planned for runs its ATen ops"
        return EagerGraph(self.eager, self.recorder.session, why)(args)

    def _replay(self, device: int, held: list, results: list, copies: list[FakeTensor]) -> None:
        """Launch the plan's kernels; `held`: the graph's inputs by position, each dropped at its last use."""
        recorder, session = self.recorder, self.recorder.session
        stream_id = recorder.current_stream_id(device)
        stream = (device, stream_id)
        inputs = _fakes(held)
        recorder.before_kernel(inputs, written=inputs)  # a compiled graph may write its inputs
        del inputs
        graphed = self.graphed_copies is not None
        if graphed:  # one graph launch; the copies into its static inputs are kernels of their own
            session.host_work(session.host.c.launch_ns, "compiled graphs")
            for tensor in copies:
                session.launch_costed(session.cost(make_op_call(aten.copy_.default, (tensor, tensor), {}, [tensor])),
                                      stream, charge_host=False)
        allocator = session.allocators[device]
        live: dict[str, int] = {}
        if self._launch_ns is None:
            self._launch_ns = [session.host.compiled_launch_ns(kernel.op) for kernel in self.plan.kernels]
        positions = self._input_positions
        for kernel, launch_ns in zip(self.plan.kernels, self._launch_ns):
            for buffer in kernel.allocates:
                if buffer.reuses is not None:  # the input dies as the kernel writes over it: its block is this one's
                    if buffer.reuses in live:
                        allocator.free(live.pop(buffer.reuses))
                    elif buffer.reuses in positions:
                        held[positions[buffer.reuses]] = None
                if buffer.output is not None:
                    result = results[buffer.output]
                    if isinstance(result, FakeTensor) and result.fake_device.type == "cuda":
                        recorder.memory.track_new_storage(result, stream_id)
                elif buffer.nbytes:
                    recorder.memory.drain_frees()
                    live[buffer.name] = allocator.malloc(buffer.nbytes, stream_id)
                    _sample(session, device)
            if kernel.op.name in _CUBLAS_CALLS:
                recorder.cublas_workspace(torch._C._current_autograd_node(), device, stream_id)
            if kernel.op.name != "inductor.nop":
                session.launch_costed(session.cost(kernel.op), stream, charge_host=not graphed, host_ns=launch_ns)
            for name in kernel.frees:
                handle = live.pop(name, None)
                if handle is not None:
                    allocator.free(handle)
                    _sample(session, device)
            for position in kernel.releases:
                held[position] = None
        for result in _fakes(results):  # results the plan does not write (inputs' views, eager-only outputs)
            if result.fake_device.type == "cuda":
                recorder.memory.track_new_storage(result, stream_id)
        for handle in live.values():
            allocator.free(handle)


class EagerGraph:
    """A graph that cannot run as its plan (`why`): its ATen ops run and are costed one by one, loudly."""

    def __init__(self, eager: torch.fx.GraphModule, session: Session, why: str) -> None:
        self._boxed_call = True
        self.eager = eager
        self.session = session
        self.why = why

    def __call__(self, args: list) -> list:
        eager_fallback(self.session, self.why)
        self.session.host_work(self.session.host.compiled_call_ns(sum(isinstance(a, torch.Tensor) for a in args)),
                                "compiled graphs")
        results = self.eager.forward(*args)  # as compiled code runs it: no nn.Module call
        args.clear()
        return list(results) if isinstance(results, (list, tuple)) else [results]


def input_shapes(inputs: Sequence[Any]) -> tuple:
    """Each tensor input's shape, a symbolic size as its hint (the size the plan was made with)."""
    def size(s: Any) -> int:
        return s if isinstance(s, int) else int(s.node.hint) if s.node.has_hint() else -1
    return tuple(tuple(size(s) for s in a.shape) for a in inputs if isinstance(a, torch.Tensor))


def _fakes(values: list) -> list[FakeTensor]:
    return [v for v in values if isinstance(v, FakeTensor)]


def _sample(session: Session, device: int) -> None:
    allocator = session.allocators[device]
    session.memory_samples.append((session.now_ns(), device, allocator.allocated_bytes, allocator.reserved_bytes))


# ----------------------------------------------------------------------------- the backend


_FORCED_CONFIG = {
    "fx_graph_cache": False,
    "fx_graph_remote_cache": False,
    "autotune_local_cache": False,
    "compile_threads": 1,
    "max_autotune": False,
    "max_autotune_gemm": False,
    "max_autotune_pointwise": False,
    "coordinate_descent_tuning": False,
    "triton.cudagraphs": False,
    "freezing": False,
    "joint_graph_constant_folding": False,
    "shape_padding": False,
    "benchmark_fusion": False,
    "benchmark_epilogue_fusion": False,
    "benchmark_kernel": False,
    "benchmark_combo_kernel": False,
}
"""Inductor settings the simulation overrides: no cache of compiled code (nothing is compiled, and a cached
module would skip the scheduler); no compile workers; no autotuning or benchmarked fusion (they time candidate
kernels on the GPU: Phantora costs GEMMs as cuBLAS calls; max-autotune's pointwise tuning changes block sizes, not
fusion); CUDA graphs handled by the runtime (runtime/cuda_graphs.py); no joint-graph constant folding (it computes
constant tensors on the device while compiling, which a simulated device cannot: the few small kernels that build
such a constant, often fused into their users, stay in the graph); no padding of GEMM shapes (Inductor pads an
unaligned GEMM where timing both on the GPU says it pays; aligned shapes, the common case, are never padded)."""


@dataclass
class SimulatedInductor:
    """The `inductor` backend of `torch.compile` under Phantora (Note [Simulated Inductor])."""

    session: Session
    recorder: KernelRecorder
    config: dict = dataclasses.field(default_factory=dict)
    """Inductor settings of the compile call's `mode` and `options` (torch's own translation of them)."""
    mode: str | None = None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        from torch._inductor.compile_fx import compile_fx

        self.session.stats.compiled["regions"] += 1
        if any(self.config.get(key) for key in ("max_autotune", "max_autotune_gemm")):
            self.session.warn_once("compile-autotune", "torch.compile: max-autotune's autotuning is not simulated "
                                                       "(no Triton GEMM templates): GEMMs are costed as cuBLAS calls")
        patches = {k: v for k, v in {**self.config, **_FORCED_CONFIG}.items() if _inductor_has(k)}
        try:
            with self.recorder.suppress():
                return compile_fx(gm, example_inputs, inner_compile=self._inner, config_patches=patches)
        except CannotPlan as why:
            return self._eager(gm, str(why))
        except Exception as error:  # noqa: BLE001 - any failure inside Inductor: eager, loudly, with the reason
            return self._eager(gm, _first_line(error))

    def _inner(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        eager = runnable_copy(gm)
        try:
            with torch.utils._python_dispatch._disable_current_modes(), self.recorder.suppress():
                plan = lower_and_plan(gm, example_inputs, is_inference=kwargs.get("is_inference", False),
                                      is_backward=kwargs.get("is_backward", False), graph_id=kwargs.get("graph_id"))
        except Exception as error:  # noqa: BLE001 - a backward graph is compiled at the first backward, out of reach of
            if not kwargs.get("is_backward"):  # `__call__`'s fallback: it runs its ATen ops, loudly
                raise
            return EagerGraph(eager, self.session, f"a backward graph runs its ATen ops ({_first_line(error)})")
        self.session.stats.compiled["graphs"] += 1
        self.session.stats.compiled["kernels"] += sum(k.op.name != "inductor.nop" for k in plan.kernels)
        return PlannedGraph(plan, eager, self.recorder, input_shapes(example_inputs),
                            self._graphed_copies(example_inputs, kwargs))

    def _graphed_copies(self, example_inputs: Sequence[Any], kwargs: dict) -> tuple[int, ...] | None:
        """With CUDA graphs (`mode="reduce-overhead"`): the inputs copied before each replay, those of a forward
        graph that are not static (parameters, buffers); a backward's inputs are the forward's outputs, which the
        graph trees keep in place. None without CUDA graphs."""
        if not self.config.get("triton.cudagraphs"):
            return None
        if kwargs.get("is_backward"):
            return ()
        static = set(kwargs.get("static_input_idxs") or ())
        return tuple(i for i, a in enumerate(example_inputs) if isinstance(a, torch.Tensor) and i not in static)

    def _eager(self, gm: torch.fx.GraphModule, why: str) -> Callable:
        eager_fallback(self.session, why)
        return gm.forward


def _inductor_has(setting: str) -> bool:
    """Whether this torch's Inductor has a setting ("triton.cudagraphs"); `_FORCED_CONFIG` names some that other
    versions may lack."""
    from torch._inductor import config

    owner = config
    for part in setting.split("."):
        if not hasattr(owner, part):
            return False
        owner = getattr(owner, part)
    return True


def _first_line(error: Exception, limit: int = 200) -> str:
    """An error as one short line: its type and the first line of its message."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def eager_fallback(session: Session, why: str) -> None:
    """A compiled region runs eagerly: counted, and a warning naming why (once per reason)."""
    session.stats.compiled[f"eager: {why}"] += 1
    session.warn_once(f"compile-eager:{why}", f"torch.compile: a region runs eagerly, its ops costed one by one "
                                              f"({why})")
