"""Host (CPU) cost model: the time eager PyTorch spends on the CPU to issue a training step.

A simulated rank's host clock advances by these amounts as its script runs; the GPU timeline
starts each kernel no earlier than the host time it was launched at, so a step whose host work
outlasts its GPU work (small models, many small kernels: "launch-bound") is as long as its host
work. Deterministic: every cost is a constant times something the runtime counts.

What is charged (constants measured on the H200 machine's CPU, 16-core VM, torch 2.11.0+cu130,
Python 3.12 — see docs/compute-model.md, "Host model"):

- every intercepted op: C++ dispatch + launch (`launch_ns`, `alloc_output_ns`, the gemm / attention
  / foreach / fused terms), views and allocations (`view_ns`, `alloc_ns`), syncs and `.item()`.
  These come from microbenchmarks: N back-to-back calls on tiny tensors with no synchronisation
  (benchmarks/host/measure_calls.py, data/h200/host/calls/ops/host.json).
- a kernel op issued from Python (not by the autograd engine): `framework_ns` — Python binding,
  autograd graph recording, autocast, the user's statements around it;
- an `nn.Module` call: `module_call_ns` — `Module.__call__` and the Python of its `forward`;
- an autograd node the backward engine runs: `autograd_node_ns` — scheduling, input buffers,
  saved variables, the node's C++; its ops pay only their dispatch and launch;
- library calls whose own Python is most of their cost: `optimizer.step()` (`optimizer_step_ns`),
  `optimizer.zero_grad()` / `module.zero_grad()` (per parameter), `clip_grad_norm_`'s norm
  (`grad_norm_ns`), a DataLoader batch (`dataloader_next_ns`, and `dataloader_contention_ns` that
  its pin-memory thread takes from the ops issued next); runtime/python_costs.py charges them.

The context terms were fitted on real launch-bound steps on the H200 machine, phase by phase
(forward, backward, clip, optimizer, zero_grad, data), for two model families at 1 to 28 layers
with and without autocast and fused/foreach AdamW (benchmarks/host/measure_launch_bound.py,
data/h200/host/launch_bound/launch_bound.json; fit: benchmarks/host/fit_context.py). Host time measured on
these VMs varied by ±20% between steps, and by up to 1.6x between leases for the same steps. The fits
divide what they measured on a lease by that lease's index (how much slower than the average lease it ran
the host-bound ground-truth commands, benchmarks/host/leases.py; call 4: 1.093), so the constants stand for
the average lease. The per-op microbenchmarks (`launch_ns`, ...: call 1) are taken as measured.
Not modelled: the user's own Python that is not a module call (a dataset's `__getitem__` run in
the main process, custom loops), real CPU tensor ops (run for real, cost 0), GC pauses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from phantora.models.compute import foreach_launches, itemsize
from phantora.models.ops import OpCall, TensorMeta


LIBRARY_CALL_NS: dict[str, int] = {
    # FSDP2 (the 1.5B llama on 2 and 4 GPUs at the average lease: benchmarks/host/fit_fsdp.py)
    "FSDPState._pre_forward": 228_000,
    "FSDPState._post_forward": 139_500,
    "FSDPState._root_post_backward_final_callback": 332_100,
    "FSDPParamGroup.unshard": 280_800,
    "FSDPParamGroup.wait_for_unshard": 339_000,
    "FSDPParamGroup.reshard": 49_700,
    "FSDPParamGroup.pre_backward": 86_800,
    "FSDPParamGroup.post_backward": 1_263_700,
    # DTensor and tensor parallelism (pooled over llama_l1b_tp2 and llama_l1b_tp4)
    "DTensor.from_local": 22_200,
    "DTensor.to_local": 18_300,
    "ColwiseParallel._prepare_input_fn": 5_300,
    "ColwiseParallel._prepare_output_fn": 10_400,
    "RowwiseParallel._prepare_input_fn": 7_700,
    "RowwiseParallel._prepare_output_fn": 30_300,
}
"""Host time per call of FSDP2's hooks and DTensor's Python entry points beyond the ops they issue and
what the rest of this model charges inside them: the mean exclusive host time of each call in real
steps on the H200 machine minus the same in Phantora's simulation of those steps (torch 2.11 on the
GPU machine; benchmarks/e2e/profile_steps.py --host-calls, data/h200/host/calls/library/, compared with
benchmarks/host/compare_calls.py). FSDP2's were fitted again in session 16 at the average lease
(benchmarks/host/fit_fsdp.py): calls 41 and 43 (data/h200/host/fsdp/runs/: the ground-truth command of
llama_l1b_fsdp2 and batch-1 runs with one and four micro-steps), two leases whose speed their ground-truth runs give
(0.87 and 1.07 of the average), pooled with session 4's runs on 2 and 4 GPUs and call 36's, whose leases' speeds
(0.93, 1.08) come from the same commands' calls on calls 41 and 43. `post_backward` takes ~0.7x as long on 4 ranks
as on 2; the constant pools both."""

ACCUMULATING_CALL_NS: dict[str, int] = {
    "FSDPState._root_post_backward_final_callback": 106_500,
    "FSDPParamGroup.post_backward": 139_600,
}
"""The same, for a backward that keeps its gradients (gradient accumulation with FSDP2's
`set_requires_gradient_sync(False)`): post_backward only accumulates them and reshards, the final callback has
no reduce-scatter to wait for. LIBRARY_CALL_NS's values are the reducing path's. Fitted with them (calls 36, 41
and 43's batch-1 runs with 4 micro-steps, benchmarks/host/fit_fsdp.py); session 14 had fitted 103 and 141
µs on call 36 alone, taking that lease's speed from the same calls' reducing path."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostConstants:
    """Host time per kind of call, in ns (H200 machine's CPU unless stated)."""

    launch_ns: int = 6500
    """C++ dispatch + one kernel launch of a plain op on tiny tensors (mul 6.5 µs, add_ 5.4, silu 6.6, sum 7.8 µs)."""
    alloc_output_ns: int = 1800
    """Extra for an op that allocates its output through the caching allocator (a+b 9.2 µs vs add(out=) 7.5 µs)."""
    framework_ns: int = 10_800
    """Per kernel op issued from Python (not by the backward engine): Python binding, autograd recording,
    autocast, the statements around it (launch-bound steps, data/h200/host/launch_bound, at the average lease: call 4's
    times over its lease index 1.093, benchmarks/host/leases.py; 11.8 µs at call 4's speed; was 9000 from call 3)."""
    module_call_ns: int = 22_200
    """Per `nn.Module` call: `__call__` and the Python of its `forward` beyond its ops (fitted with
    `framework_ns` on forward phases; an identity module called in a hot loop takes 0.85 µs)."""
    autograd_node_ns: int = 14_400
    """Per autograd node the backward engine runs; its ops pay dispatch and launch only (fitted on
    backward phases, data/h200/host/launch_bound)."""
    optimizer_step_ns: int = 182_600
    """Python of one `optimizer.step()` beyond its ops (median over 12 measured steps, fused and foreach
    AdamW, 12-255 parameters: the per-tensor cost is in the foreach / fused terms, the per-launch cost in
    `foreach_launch_ns`; 230 µs before session 16 gave that term's share to this one)."""
    zero_grad_ns: int = 24_800
    """`zero_grad(set_to_none=True)`, per call (it launches nothing) ..."""
    zero_grad_per_param_ns: int = 1_500
    """... and per parameter (measured 0.05 ms for 12 parameters, 0.47 ms for 255)."""
    grad_norm_ns: int = 175_200
    """Python of `clip_grad_norm_`'s total norm beyond its ops (grouping by device and dtype; median
    over 12 measured steps)."""
    dataloader_next_ns: int = 75_700
    """`next()` on a DataLoader whose workers have the batch ready (2 workers, pinned memory; median of
    4 measured steps: 0.05-0.10 ms)."""
    dataloader_contention_ns: int = 885_600
    """What else such a loader takes from the main thread per batch, while it issues the next ops (the
    pin-memory thread competes for the GIL and the CPU): step time with the loader minus without,
    measured side by side 4 times on two machines (+0.86, +0.90, +0.94, +1.76 ms), less `next()` and
    the batch's copies."""
    view_ns: int = 1200
    """View / metadata op, no kernel (view 1.4 µs, t 1.0 µs)."""
    alloc_ns: int = 2600
    """Pure allocation (torch.empty, 2.6 µs)."""
    gemm_extra_ns: int = 4700
    """cuBLAS heuristics + launch on top of launch_ns (mm 64x64: 11.2 µs)."""
    gemm_select_ns: int = 220_000
    """cuBLAS's algorithm selection for a GEMM problem (inputs' shapes, strides and dtypes) the process
    has not run before, on top of `gemm_extra_ns`; cuBLAS caches its choice, so a problem pays once.
    Steps of fixed shapes pay it in their first step only; a mixture-of-experts layer, whose experts'
    row counts change from call to call, pays it on most expert GEMMs (Note [Simulated routing] in
    runtime/routing.py). Measured (benchmarks/host/measure_moe.py, data/h200/host/moe): a
    bf16 [m, 256] x [256, 256] product of new m 218 µs more than of a repeated m on the host of the
    ground-truth runs (call 11, where `mm` takes 21 µs); on a host 1.8x as fast (calls 12, 13) the
    expert-sized products (k, n of 2048 and 4096, m or k ~4000: forward, input and weight gradient)
    86-156 µs more, the 256-wide one 110-125 µs. Not told apart: m below ~400 (590-670 µs there) and
    fp32 (460-530 µs)."""
    gemm_kernel_load_ns: int = 4_300_000
    """The first launch in the process of a cuBLAS kernel, on top of `gemm_select_ns` (models/gemm_kernels.py
    Note [First launch of a cuBLAS kernel]: kernels the GPU's table or a profile of the op names). Calls 44-45:
    moe_a2a's expert FFNs replayed on one H200, first pass less second pass against first-launched kernels,
    3.0 ms forward and 3.9 ms backward on uncontended hosts, 4.3 ms pooled at the mean host
    (benchmarks/kernels/gemm_kernels.py)."""
    attention_extra_ns: int = 9500
    """SDPA backend kernels on top of launch_ns (flash/cuDNN fwd, small: 16 µs)."""
    foreach_base_ns: int = 6000
    """A foreach op with one tensor (_foreach_add_ 5.9 µs)."""
    foreach_inplace_per_tensor_ns: int = 900
    """Per tensor of an in-place foreach op in an optimizer step (bare: 0.17 µs; in situ with the
    optimizer's Python grouping: ~0.9 µs, AdamW over 255 tensors: 3.5 ms for 12 foreach ops)."""
    foreach_alloc_per_tensor_ns: int = 8000
    """Per tensor of a foreach op that allocates outputs (_foreach_norm bare: 1.5 µs/tensor;
    clip_grad_norm_ in situ: 2.6 ms for 255 tensors, its Python grouping included)."""
    foreach_launch_ns: int = 6000
    """Per kernel launch of a foreach or fused-optimizer op beyond its first (multi_tensor_apply launches once per
    320 chunks of 65536 elements, or per 30-110 tensors: `compute.foreach_launches`). Large parameters make
    many: an AdamW foreach op over moe_a2a's 40 parameters (3.2 GB) launches 39 kernels and took 268-292 µs of
    host time in a profiled step (call 33), against 42 charged for one launch; 6.0 µs per further launch, what a
    `cudaLaunchKernel` took there (5.6). The same step's optimizer stretch on call 42 is 2.7 ms longer than
    the simulation without it, at the average lease."""
    fused_optimizer_per_tensor_ns: int = 2300
    """Per parameter of a fused optimizer op (AdamW(fused=True).step: 2.32 ms for 1000 params)."""
    sync_ns: int = 7200
    """torch.cuda.synchronize() on an idle GPU."""
    item_ns: int = 10600
    """.item() round trip of a finished scalar (device-to-host copy + sync), GPU idle."""
    collective_ns: int = 15000
    """Host side of one c10d NCCL call (ProcessGroupNCCL: work object, stream sync events, ncclGroup
    launch): an estimate, not measured yet."""
    functional_collective_ns: int = 117_000
    """A functional collective (`torch.distributed._functional_collectives`: the custom op's Python,
    the AsyncCollectiveTensor it returns) beyond `collective_ns`: a small all_to_all_single took 89 µs
    of host time against 25 µs through c10d (calls 12-13, measure_moe_host.py), scaled by 1.83 to the
    host of the ground-truth runs (a same-shape `mm` took 21.4 µs there, 11.7 there). It is what
    tensor parallelism's `DTensor.redistribute` had been charged beyond its ops (115 µs), which now
    goes here. Charged per call of the module's API from Python (runtime/python_costs.py)."""
    all_to_all_extra_ns: int = 147_800
    """A functional all-to-all (`all_to_all_single[_autograd]`) beyond `functional_collective_ns`: its split
    sizes (the output's rows, the per-peer lists the process group turns into one send and one receive per
    peer) and its wait registration. Fitted in situ on moe_ep4's forward (benchmarks/host/fit_moe.py,
    calls 31 and 39 at the average lease: the counts', dispatch's and combine's all-to-alls took 290-345 µs
    against 133 charged, each with a ~32 µs timeline mark that the fit takes off); calls 12-13 and 28 timed it
    alone, back to back, at 89-250 µs."""
    index_extra_ns: int = 19_100
    """Advanced indexing by a tensor of indices (`x[idx]`, `index_add`, `index_put_`) on top of a plain op: the
    indices' checks and the restrided iterator. Fitted in situ on moe_ep4's token gather (benchmarks/
    fit_moe_host.py, calls 31 and 39: `x[token]` took 71 µs at the average lease against 21 charged, less its ~32 µs
    timeline mark; a profiled `aten::index` took 41 µs against ~18 for a one-kernel op: call 33)."""
    radix_sort_pass_ns: int = 20_000
    """Per byte of key of a sort along a dimension longer than 4096 (PyTorch runs CUB's radix sort then,
    one memset and one kernel per 8 bits, plus a histogram and a scan): a stable argsort of 16384 int64
    took 99-107 µs of host time (12 µs for a plain op) on the fast host of calls 12-13, so 11.4 µs per
    pass there, 20.9 scaled by 1.83 (see `functional_collective_ns`)."""
    subclass_op_ns: int = 68_200
    """Per op issued from Python on a tensor subclass with its own dispatch (DTensor): unwrapping, sharding
    propagation (cached), redistribution checks and re-wrapping, beyond the ops it then issues on the
    local tensors. Fitted on the forward phase of llama_l1b_tp2 (data/h200/host/calls/library): 62 ms of host
    time missing over 878 DTensor ops, less what LIBRARY_CALL_NS accounts for. Fitted again in session 14 like
    `subclass_backward_op_ns`, on the forward host time of the same timelines, with the ops on functional
    collectives' results charged apart (benchmarks/host/fit_dtensor.py: 61, 62 and 57 µs over ~1000
    DTensor ops per rank and step; 60 pooled, was 59). Session 15: the timelines at the average lease (each
    over its lease's index, benchmarks/host/leases.py; calls 8, 14, 15, 27 and 38): 72, 73 and 67 µs, 71
    pooled. Session 16, after FSDP2's calls were refitted (fsdp2_tp2 pays them too) and the indices moved with
    three more leases: 70, 71 and 63 µs, 68 pooled."""
    subclass_backward_op_ns: int = 48_700
    """The same for an op the autograd engine issues (in C++, no Python around it). Fitted on the backward
    host time of tensor-parallel steps: the mean over every rank and step of llama_l1b_tp2, tp4 and
    fsdp2_tp2's timelines (370 in all, from four leases: calls 14, 15, 27 and session 5; the mean host, as
    the other constants) against the simulation of each with every rank at the mean host
    (benchmarks/host/fit_dtensor.py: 45, 46 and 38 µs; 43 pooled). Session 4 had fitted 59 µs on one
    run of tp2 whose backward alone was contended (171 ms against 109-121 on other leases); the forward's
    59 µs still fits (simulated forward 92-100 ms against 96-100 real). Session 15, at the average lease (see
    `subclass_op_ns`): 55, 54 and 45 µs, 51 pooled; session 16: 54, 53 and 40, 49 pooled."""
    subclass_op_per_tensor_ns: int = 5_200
    """... and per subclass tensor beyond the first in its arguments: a foreach op over a list of DTensor
    parameters in `clip_grad_norm_` or the optimizer (2342 such tensors per step for a 147-parameter model).
    Fitted on the clip + optimizer host time of the tensor-parallel timelines at the average lease
    (benchmarks/host/fit_dtensor.py, session 15): tp2 23.4 ms, tp4 21.5, fsdp2_tp2 15.9, against 11.5 at
    2.3 µs; 7.4, 6.5 and 4.0 µs, 5.8 pooled. Session 16, with each foreach op's further kernel launches
    charged (`foreach_launch_ns`: 1.5B parameters take several): 6.3, 6.0 and 3.5 µs, 5.2 pooled. Session 4 had
    fitted 2.3 on llama_l1b_fsdp4's (one lease, call 7, whose index is unknown): FSDP2's one-dimensional,
    uniformly sharded lists look cheaper, and the model does not tell placements apart."""
    async_collective_op_ns: int = 176_300
    """Per op on a functional collective's result (`AsyncCollectiveTensor`) before it is waited for, beyond the
    op itself: its `__torch_dispatch__` in Python (the arguments and the outputs mapped through pytree, a
    `wait_tensor` on each argument not yet waited for, or for a view op a new wrapper per output). Fitted in
    situ on moe_ep4's forward (benchmarks/host/fit_moe.py, calls 31 and 39 at the average lease), each
    stretch less its ~32 µs timeline mark: each expert's cat of 4 chunks (4 waits) took 157 µs beyond the cat,
    the weighting's multiplication (1 wait) 195, so a wait costs next to nothing beside the Python around it
    (`wait_tensor` itself takes 1 µs in C++: call 33); the constant is their mean. `aten.view` skips it (the
    dispatch's fast path wraps its result and does nothing else). Tensor parallelism meets a few per layer (the
    all-reduced activations' residual add and RMSNorm's first ops)."""
    async_collective_per_output_ns: int = 10_100
    """... and per output a view op re-wraps (a split of the dispatched rows into 8 chunks wraps 8: ~257 µs
    at the average lease, less its mark)."""
    library_call_ns: Mapping[str, int] = field(default_factory=lambda: dict(LIBRARY_CALL_NS))
    """Python of distributed-library calls beyond the ops they issue, per call (runtime/python_costs.py
    charges them at the call's start; the names are `Class.method`)."""
    accumulating_call_ns: Mapping[str, int] = field(default_factory=lambda: dict(ACCUMULATING_CALL_NS))
    """... of those that take a lighter path in a backward that keeps its gradients, that path's."""
    query_ns: int = 1500
    """Event.query() / Stream.query() (cudaEventQuery through torch): an estimate, not measured yet;
    it keeps polling loops (`while not e.query()`) advancing in simulated time."""

    def scaled(self, factor: float) -> "HostConstants":
        """Every host time multiplied by `factor` (a host CPU that takes `factor` times as long)."""
        if factor == 1.0:
            return self
        return HostConstants(**{f.name: _scaled(getattr(self, f.name), factor) for f in fields(self)})


def _scaled(value: int | Mapping[str, int], factor: float) -> int | dict[str, int]:
    if isinstance(value, Mapping):
        return {name: round(ns * factor) for name, ns in value.items()}
    return round(value * factor)


H200_HOST = HostConstants()
"""Constants measured on the H200 machine of this project (2026-11-21)."""

_VIEW_OPS = frozenset({
    "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.expand", "aten.slice", "aten.select",
    "aten.unsqueeze", "aten.squeeze", "aten.detach", "aten.alias", "aten.as_strided", "aten.permute", "aten.split",
    "aten.split_with_sizes", "aten.unbind", "aten.narrow", "aten.diagonal", "aten.unfold", "aten._reshape_alias",
    "aten.view_as_real", "aten.view_as_complex", "aten.lift_fresh", "aten.expand_as", "aten.view_as", "aten.movedim",
    "aten.chunk", "aten.unsafe_split", "aten._conj", "aten._neg_view", "prim.device", "aten.sym_size", "aten.sym_stride",
})
_ALLOC_OPS = frozenset({"aten.empty", "aten.empty_strided", "aten.empty_like", "aten.new_empty", "aten.new_empty_strided"})
_GEMM_OPS = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.addbmm", "aten.mv",
                       "aten.addmv", "aten.dot"})
_INDEX_OPS = frozenset({"aten.index", "aten.index_add", "aten.index_add_", "aten.index_put", "aten.index_put_",
                        "aten._index_put_impl_"})
"""Advanced indexing ops that pay `index_extra_ns`."""
_SELECTED_GEMMS = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.addbmm"})
"""GEMMs that cuBLAS(Lt) chooses an algorithm for by heuristics (matrix-vector products do not)."""
_MULTI_TENSOR = ("aten._foreach_", "aten._fused_adam", "aten._fused_sgd")


def _packet(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name


class HostModel:
    """Host time of intercepted calls. Pure: same op, same answer."""

    def __init__(self, constants: HostConstants = H200_HOST):
        self.c = constants

    def op_ns(self, op: OpCall, *, backward: bool = False) -> int:
        """Host time of one intercepted op as it is issued inside a training step; `backward`: issued by
        the autograd engine (its node pays `autograd_node_ns`), not from Python."""
        p = _packet(op.name)
        c = self.c
        if p in _VIEW_OPS:
            return c.view_ns
        if p in _ALLOC_OPS:
            return c.alloc_ns
        if p == "aten._local_scalar_dense":
            return c.item_ns
        if p.startswith(_MULTI_TENSOR):
            return self._foreach_ns(op, p)
        t = c.launch_ns if backward else c.launch_ns + c.framework_ns
        if op.outputs and not p.endswith("_"):
            t += c.alloc_output_ns
        if p in _GEMM_OPS:
            t += c.gemm_extra_ns
        elif p == "aten.sort":
            t += self._radix_passes(op) * c.radix_sort_pass_ns
        elif "attention" in p:
            t += c.attention_extra_ns
        elif p in _INDEX_OPS:
            t += c.index_extra_ns
        return t

    @staticmethod
    def _radix_passes(op: OpCall) -> int:
        """Radix-sort passes of a CUDA sort: none for a sorted dimension of at most 4096 elements (a
        bitonic sort in one kernel), else one per byte of key."""
        inputs = op.tensor_inputs()
        if not inputs or not inputs[0].shape:
            return 0
        dim = dict(op.kwargs).get("dim", next((a for a in op.args[1:] if isinstance(a, int) and not isinstance(a, bool)), -1))
        shape = inputs[0].shape
        if shape[dim % len(shape)] <= 4096:
            return 0
        return itemsize(inputs[0])

    def gemm_problem(self, op: OpCall) -> tuple | None:
        """What cuBLAS keys its algorithm choice by for a GEMM op (inputs' shapes, strides and dtypes,
        the result's dtype); None for other ops."""
        p = _packet(op.name)
        if p not in _SELECTED_GEMMS:
            return None
        out = op.outputs[0].dtype if op.outputs else None
        return p, out, tuple((m.shape, m.stride, m.dtype) for m in op.tensor_inputs())

    def gemm_select_ns(self) -> int:
        """Host time of cuBLAS choosing an algorithm for a GEMM problem the process has not run."""
        return self.c.gemm_select_ns

    def gemm_kernel_load_ns(self) -> int:
        """Host time of the process's first launch of a cuBLAS kernel."""
        return self.c.gemm_kernel_load_ns

    def pays_framework(self, op: OpCall, *, backward: bool = False) -> bool:
        """Whether `op_ns` includes `framework_ns` for this op (a kernel op issued from Python)."""
        if backward:
            return False
        p = _packet(op.name)
        return not (p in _VIEW_OPS or p in _ALLOC_OPS or p == "aten._local_scalar_dense" or p.startswith(_MULTI_TENSOR))

    def view_ns(self, name: str) -> int:
        """Host time of a view/metadata op (the runtime filters these out before the compute model)."""
        return self.c.view_ns

    def alloc_ns(self, name: str) -> int:
        """Host time of a pure allocation (empty, empty_strided)."""
        return self.c.alloc_ns

    def sync_ns(self) -> int:
        """Host time of a synchronize once the GPU work it waits for is done."""
        return self.c.sync_ns

    def collective_ns(self) -> int:
        """Host time of issuing one NCCL call through c10d."""
        return self.c.collective_ns

    def functional_collective_ns(self, name: str) -> int:
        """Host time of functional collective `name`'s Python beyond its c10d call."""
        extra = self.c.all_to_all_extra_ns if name.startswith("all_to_all") else 0
        return self.c.functional_collective_ns + extra

    def query_ns(self) -> int:
        """Host time of a stream or event query."""
        return self.c.query_ns

    def subclass_op_ns(self, tensors: int, *, backward: bool = False) -> int:
        """Host time of a tensor subclass's own dispatch of one op with `tensors` subclass arguments;
        `backward`: issued by the autograd engine."""
        own = self.c.subclass_backward_op_ns if backward else self.c.subclass_op_ns
        return own + self.c.subclass_op_per_tensor_ns * max(tensors - 1, 0)

    def async_collective_op_ns(self, outputs: int, *, mapped: bool = True) -> int:
        """Host time of an `AsyncCollectiveTensor`'s own dispatch of one op; `outputs`: the outputs it wraps
        (a view op's), 0 for an op that waits on its arguments; `mapped`: False for `aten.view`, which its
        dispatch wraps on a fast path (no pytree maps, no wait)."""
        dispatch = self.c.async_collective_op_ns if mapped else 0
        return dispatch + self.c.async_collective_per_output_ns * outputs

    def library_call_ns(self, name: str, *, accumulating: bool = False) -> int:
        """Host time of one call of library Python `name` (`Class.method`) beyond its ops; 0 if unknown.
        `accumulating`: made in a backward that keeps its gradients (no gradient sync)."""
        if accumulating and name in self.c.accumulating_call_ns:
            return self.c.accumulating_call_ns[name]
        return self.c.library_call_ns.get(name, 0)

    def library_calls(self) -> list[str]:
        """The library calls this model charges."""
        return sorted(self.c.library_call_ns)

    def module_call_ns(self) -> int:
        """Host time of one `nn.Module` call, beyond the ops it issues."""
        return self.c.module_call_ns

    def autograd_node_ns(self) -> int:
        """Host time of the backward engine running one node, beyond the ops it issues."""
        return self.c.autograd_node_ns

    def optimizer_step_ns(self) -> int:
        """Host time of `optimizer.step()`'s Python, beyond the ops it issues."""
        return self.c.optimizer_step_ns

    def zero_grad_ns(self, params: int) -> int:
        """Host time of `zero_grad()` over `params` parameters, beyond any ops it issues."""
        return self.c.zero_grad_ns + self.c.zero_grad_per_param_ns * params

    def grad_norm_ns(self) -> int:
        """Host time of `clip_grad_norm_`'s total-norm Python, beyond the ops it issues."""
        return self.c.grad_norm_ns

    def dataloader_next_ns(self) -> int:
        """Host time of fetching one ready batch from a DataLoader iterator."""
        return self.c.dataloader_next_ns

    def dataloader_contention_ns(self) -> int:
        """Host time a DataLoader's helper threads take from the main thread per batch, while it
        issues the ops that follow (the runtime spreads it over them: Session.host_contention)."""
        return self.c.dataloader_contention_ns

    def _foreach_ns(self, op: OpCall, p: str) -> int:
        c = self.c
        lists = [v for v in op.args if isinstance(v, tuple) and v and isinstance(v[0], TensorMeta)]
        n = max((len(v) for v in lists), default=1)
        more_launches = max(foreach_launches(op) - 1, 0) * c.foreach_launch_ns
        if p.startswith("aten._fused_"):
            return c.foreach_base_ns + c.fused_optimizer_per_tensor_ns * n + more_launches
        allocates = not p.endswith("_")  # out-of-place foreach ops (and _foreach_norm) allocate a list
        per = c.foreach_alloc_per_tensor_ns if allocates else c.foreach_inplace_per_tensor_ns
        return c.foreach_base_ns + per * n + more_launches
