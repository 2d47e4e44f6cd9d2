"""CUDA extensions built at run time: a stand-in that launches PyTorch's equivalent kernel, or a clear error.

Note: [CUDA extensions]
Programs build CUDA extensions when they start: DeepSpeed compiles its FusedAdam (its default optimizer from
a JSON config) the first time the optimizer is made, through `torch.utils.cpp_extension.load`. Their kernels
cannot run on a simulated GPU, and the build needs CUDA's headers. Where PyTorch has a kernel that does the
same work, the extension is replaced by a module with the same functions, which launch PyTorch's kernel and
are costed as it is: DeepSpeed's `multi_tensor_adam` is a multi-tensor Adam step over chunks of many tensors,
one launch per group of tensors, as PyTorch's fused Adam (`_fused_adam_` / `_fused_adamw_`) is. An extension
is recognised by the sources it is built from. Building any other CUDA extension fails with a one-line error
naming it (`load_inline` with CUDA sources too).
"""

from __future__ import annotations

import os
import types
from typing import Callable

import torch


def _deepspeed_fused_adam(name: str) -> types.ModuleType:
    """DeepSpeed's `fused_adam` (ops/csrc/adam/fused_adam_frontend.cpp): `multi_tensor_adam`."""

    def multi_tensor_adam(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list[list[torch.Tensor]],
                          lr: float, beta1: float, beta2: float, epsilon: float, step: int, mode: int,
                          bias_correction: int, weight_decay: float) -> None:
        grads, params, exp_avgs, exp_avg_sqs = tensor_lists[:4]
        if not params:
            return
        # the step count lives on the host in DeepSpeed's kernel: a step tensor here costs no kernel
        steps = [torch.empty((), dtype=torch.float32, device=params[0].device)] * len(params)
        adam = torch._fused_adamw_ if mode == 1 else torch._fused_adam_  # ADAM_MODE_1: decoupled weight decay
        adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=beta1, beta2=beta2,
             weight_decay=weight_decay, eps=epsilon, amsgrad=False, maximize=False)

    module = types.ModuleType(name, "Phantora's stand-in for DeepSpeed's fused_adam CUDA extension")
    module.multi_tensor_adam = multi_tensor_adam
    return module


STAND_INS: dict[frozenset[str], Callable[[str], types.ModuleType]] = {
    frozenset({"fused_adam_frontend.cpp", "multi_tensor_adam.cu"}): _deepspeed_fused_adam,
}
"""The source files an extension is built from -> a function making its stand-in module."""

_CUDA_SOURCE = (".cu", ".cuh")


def _load(original: Callable, name: str, sources, *args, **kwargs):
    sources = [sources] if isinstance(sources, str) else list(sources)
    files = frozenset(os.path.basename(s) for s in sources)
    stand_in = STAND_INS.get(files)
    if stand_in is not None:
        return stand_in(name)
    if kwargs.get("with_cuda") or any(s.endswith(_CUDA_SOURCE) for s in sources):
        raise NotImplementedError(_refusal(name, sources))
    return original(name, sources, *args, **kwargs)


def _load_inline(original: Callable, name: str, cpp_sources, cuda_sources=None, *args, **kwargs):
    if cuda_sources or kwargs.get("with_cuda"):
        raise NotImplementedError(_refusal(name, []))
    return original(name, cpp_sources, cuda_sources, *args, **kwargs)


def _refusal(name: str, sources: list[str]) -> str:
    hint = ""
    if any(f"{os.sep}deepspeed{os.sep}" in s for s in sources):
        hint = (" (DeepSpeed: choose an optimizer that needs no extension, e.g. \"optimizer\": {\"type\": "
                "\"AdamW\", \"params\": {\"torch_adam\": true}}, or FusedAdam, which Phantora simulates)")
    return (f"phantora: the CUDA extension '{name}' cannot run on a simulated GPU, and Phantora has no stand-in "
            f"for it{hint}")


def install_extension_stand_ins() -> None:
    """Note [CUDA extensions]. Imported here, once the fake device is installed: at import, cpp_extension looks
    for CUDA and warns "No CUDA runtime is found" on every rank while `torch.cuda.is_available()` is False."""
    import torch.utils.cpp_extension as cpp_extension

    load, load_inline = cpp_extension.load, cpp_extension.load_inline
    cpp_extension.load = lambda name, sources, *a, **k: _load(load, name, sources, *a, **k)
    cpp_extension.load_inline = lambda name, cpp_sources, cuda_sources=None, *a, **k: _load_inline(
        load_inline, name, cpp_sources, cuda_sources, *a, **k)
