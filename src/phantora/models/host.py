"""Host (CPU) cost model: the time eager PyTorch spends on the CPU per intercepted op.

A simulated rank's host clock advances by these amounts as its script issues ops; the GPU
timeline starts each kernel no earlier than the host time it was launched at. The constants are
deterministic numbers measured on the H200 machine's CPU (16-core VM, torch 2.11.0+cu130,
Python 3.12) — see docs/compute-model.md, "Host model":

- `launch_ns`, `view_ns`, `alloc_ns`, `gemm_extra_ns`, `attention_extra_ns`, the foreach terms,
  `sync_ns` and `item_ns` come from microbenchmarks: N back-to-back calls on tiny tensors with no
  synchronisation (benchmarks/h200/measure_host.py, data/h200/call1/host.json).
- `framework_ns` is the rest of a real training step's host time, spread over its kernel ops: the
  user's Python between ops, nn.Module calls, autograd graph recording and the backward engine,
  autocast. Fitted on the llama benchmark's op sequence run with tiny shapes so the step is
  host-bound (benchmarks/h200/measure_phases.py, data/h200/call3/phases.json): forward 29.8 ms for
  1537 kernel ops + 1466 views, backward 47-53 ms for 2739 kernel ops + 2142 views.
  Measurements on this VM varied by up to ±30% between steps and machines.
"""

from __future__ import annotations

from dataclasses import dataclass

from phantora.models.ops import OpCall, TensorMeta


@dataclass(frozen=True, kw_only=True, slots=True)
class HostConstants:
    """Host time per kind of call, in ns (H200 machine's CPU unless stated)."""

    launch_ns: int = 6500
    """C++ dispatch + one kernel launch of a plain op on tiny tensors (mul 6.5 µs, add_ 5.4, silu 6.6, sum 7.8 µs)."""
    alloc_output_ns: int = 1800
    """Extra for an op that allocates its output through the caching allocator (a+b 9.2 µs vs add(out=) 7.5 µs)."""
    framework_ns: int = 9000
    """Per kernel op inside a training step: user Python, module calls, autograd recording / engine, autocast."""
    view_ns: int = 1200
    """View / metadata op, no kernel (view 1.4 µs, t 1.0 µs)."""
    alloc_ns: int = 2600
    """Pure allocation (torch.empty, 2.6 µs)."""
    gemm_extra_ns: int = 4700
    """cuBLAS heuristics + launch on top of launch_ns (mm 64x64: 11.2 µs)."""
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
    fused_optimizer_per_tensor_ns: int = 2300
    """Per parameter of a fused optimizer op (AdamW(fused=True).step: 2.32 ms for 1000 params)."""
    sync_ns: int = 7200
    """torch.cuda.synchronize() on an idle GPU."""
    item_ns: int = 10600
    """.item() round trip of a finished scalar (device-to-host copy + sync), GPU idle."""
    collective_ns: int = 15000
    """Host side of one c10d NCCL call (ProcessGroupNCCL: work object, stream sync events, ncclGroup
    launch): an estimate, not measured yet."""
    query_ns: int = 1500
    """Event.query() / Stream.query() (cudaEventQuery through torch): an estimate, not measured yet;
    it keeps polling loops (`while not e.query()`) advancing in simulated time."""


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


def _packet(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name


class HostModel:
    """Host time of intercepted calls. Pure: same op, same answer."""

    def __init__(self, constants: HostConstants = H200_HOST):
        self.c = constants

    def op_ns(self, op: OpCall) -> int:
        """Host time of one intercepted op as it is issued inside a training step."""
        p = _packet(op.name)
        c = self.c
        if p in _VIEW_OPS:
            return c.view_ns
        if p in _ALLOC_OPS:
            return c.alloc_ns
        if p == "aten._local_scalar_dense":
            return c.item_ns
        if p.startswith("aten._foreach_") or p.startswith("aten._fused_adam") or p.startswith("aten._fused_sgd"):
            return self._foreach_ns(op, p)
        t = c.launch_ns + c.framework_ns
        if op.outputs and not p.endswith("_"):
            t += c.alloc_output_ns
        if p in _GEMM_OPS:
            t += c.gemm_extra_ns
        elif "attention" in p:
            t += c.attention_extra_ns
        return t

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

    def query_ns(self) -> int:
        """Host time of a stream or event query."""
        return self.c.query_ns

    def _foreach_ns(self, op: OpCall, p: str) -> int:
        c = self.c
        lists = [v for v in op.args if isinstance(v, tuple) and v and isinstance(v[0], TensorMeta)]
        n = max((len(v) for v in lists), default=1)
        if p.startswith("aten._fused_"):
            return c.foreach_base_ns + c.fused_optimizer_per_tensor_ns * n
        allocates = not p.endswith("_")  # out-of-place foreach ops (and _foreach_norm) allocate a list
        per = c.foreach_alloc_per_tensor_ns if allocates else c.foreach_inplace_per_tensor_ns
        return c.foreach_base_ns + per * n
