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
multiplications per step (data/h200/call22/: the real step runs one norm kernel each way).
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
