"""Ops that a CUDA build runs as one kernel must reach the interception layer whole.

Note: [Composite ops on a CPU build]
Some aten ops have both backend kernels and a CompositeImplicitAutograd fallback (e.g.
`silu_backward`). The dispatcher uses the fallback for a backend that has no kernel, and a CPU
build has no CUDA kernels, so on fake CUDA tensors such an op would arrive as the five small
kernels of its decomposition instead of the single kernel a GPU runs. Registering a CUDA kernel
for each such op restores the GPU's dispatch table; the registered function is never reached,
because the Python dispatch mode (and FakeTensor's own dispatch) intercepts first.

A second kind has no CPU kernel at all: `_fused_rms_norm` (what `F.rms_norm` and `nn.RMSNorm`
call) has a CUDA kernel and a derivative (`_fused_rms_norm_backward`) on a GPU build, and only its
decomposition elsewhere. Unregistered, TorchTitan's 8B step gained ~250 ms of pow, mean, rsqrt and
multiplications per step (data/h200/e2e/step_profiles/runs/2026-11-22-19/: the real step runs one norm kernel each way).

Note: [Ops that skip the Python dispatch]
`no_dispatch()` (torch.utils._mode_utils: `_DisableTorchDispatch`) turns Python dispatch off, so an op
on a fake CUDA tensor inside it goes past the dispatch modes and the fake tensor's own dispatch to the
CUDA kernel, which a CPU build does not have. Libraries do this for ops they want kept away from tensor
subclasses (FSDP1's mixed precision calls `record_stream` so). PyTorch's own C++ does it too:
`torch.tensor(data)` builds its tensor with the Python dispatch off and reads each element of `data` with
`item()`, so for a list of 0-dim GPU tensors (`torch.tensor([p.grad.norm() for p in params])`, Megatron's
gradient norm without Apex) `_local_scalar_dense` reaches the CUDA key, where a GPU build copies each scalar to
the host and waits. A GPU runs such an op as any other, so each such op gets a CUDA kernel that turns the
Python keys back on and dispatches the op again, below autograd (which has already run for it), into the
simulation, where a read is a placeholder or a known value with its copy and wait (handlers.py). (A fallback
for the CUDA key, which would cover every op, fails an internal assert of torch 2.13's Python dispatcher.)
"""

from __future__ import annotations

import torch

_library: torch.library.Library | None = None

GPU_FUSED_OPS = ("aten::_fused_rms_norm",)
"""Ops that a CUDA build runs as one fused kernel and a CPU build only as a decomposition."""


def ops_decomposed_only_on_cpu_builds() -> list[str]:
    """aten ops that a CUDA build runs as one kernel and this build would decompose: those with a CPU
    kernel and a CompositeImplicitAutograd fallback but no CUDA kernel, and GPU_FUSED_OPS."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and has(name, "CompositeImplicitAutograd") and has(name, "CPU") \
                and not has(name, "CUDA"):
            found.append(name)
    return sorted(found + [n for n in GPU_FUSED_OPS if not has(n, "CUDA")])


def _unreachable(*args, **kwargs):
    raise RuntimeError("phantora: a placeholder CUDA kernel ran; the op should have been intercepted")


def register_cuda_kernels_for_composite_ops() -> list[str]:
    global _library
    names = ops_decomposed_only_on_cpu_builds()
    if names and _library is None:
        _library = torch.library.Library("aten", "IMPL")
        for name in names:
            _library.impl(name.removeprefix("aten::"), _unreachable, "CUDA")
    return names


OPS_CALLED_WITHOUT_PYTHON_DISPATCH = ("record_stream", "_local_scalar_dense")
"""aten ops that reach CUDA tensors with the Python dispatch off (Note [Ops that skip the Python dispatch]):
FSDP1's `_no_dispatch_record_stream`; the element reads of `torch.tensor(list of GPU scalars)`."""

_redispatch_library: torch.library.Library | None = None


def _into_the_simulation(op: torch._ops.OpOverload):
    """A CUDA kernel for `op` that dispatches it again with the Python keys on, below autograd (Note [Ops that
    skip the Python dispatch])."""

    def kernel(*args, **kwargs):
        with (torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.Python, False),
              torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.PythonTLSSnapshot, False),
              torch._C._AutoDispatchBelowAutograd()):
            return op(*args, **kwargs)

    return kernel


def register_cuda_redispatch() -> None:
    """The ops of OPS_CALLED_WITHOUT_PYTHON_DISPATCH reach the simulation from the CUDA key too."""
    global _redispatch_library
    if _redispatch_library is not None:
        return
    _redispatch_library = torch.library.Library("aten", "IMPL")
    for name in OPS_CALLED_WITHOUT_PYTHON_DISPATCH:
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            _redispatch_library.impl(op, _into_the_simulation(op), "CUDA")
