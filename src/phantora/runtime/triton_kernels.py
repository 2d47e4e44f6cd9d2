"""A program's own Triton kernels, launched on the simulated GPU.

Note: [Triton kernels]
Libraries launch Triton kernels of their own (`@triton.jit` functions, `kernel[grid](*args)`): TorchTitan's
MoE token permutation, Liger's fused losses. Triton cannot compile or launch one without a GPU driver. A
launch whose arguments include a fake CUDA tensor is therefore simulated instead (`KernelInterface.__getitem__`,
which plain, autotuned and heuristic kernels all launch through): one kernel on the current stream, named
`triton.<function>`, after the NCCL results it reads (distributed Note [Unwaited NCCL results]). Its
arguments do not say what it computes, so it gets the generic memory-bound estimate (its tensor arguments
read once); it is an unmodelled op, listed in the summary and an error under `--strict`, until a measured
database entry (`phantora profile` cannot rebuild it) or a model covers it. A Triton kernel may write any
tensor it is given, so the known values of all of them are forgotten (Note [Shadow values]).

Triton is patched when the program imports it (`triton.runtime.jit`), so runs that never use it do not pay
its import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Any, Callable

from torch._subclasses.fake_tensor import FakeTensor

from phantora.models.ops import OpCall
from phantora.runtime.dispatch import KernelRecorder, _plain

JIT_MODULE = "triton.runtime.jit"


def kernel_name(kernel: Any) -> str:
    """`triton.<function name>` of a JITFunction, or of the function an autotuner or heuristics wraps."""
    while not hasattr(kernel, "__name__") and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return "triton." + getattr(kernel, "__name__", type(kernel).__name__)


def launch_call(kernel: Any, grid: Any, args: tuple, kwargs: dict) -> OpCall:
    """The launch as the cost model sees it: the kernel's name, its arguments (tensors as metadata) and grid."""
    launch_kwargs = dict(kwargs)
    if isinstance(grid, (tuple, list)) and all(isinstance(g, int) for g in grid):
        launch_kwargs["grid"] = tuple(grid)
    return OpCall(name=kernel_name(kernel), args=tuple(_plain(a) for a in args),
                  kwargs=tuple(sorted((k, _plain(v)) for k, v in launch_kwargs.items())), outputs=())


def simulated_launcher(recorder: KernelRecorder, kernel: Any, grid: Any, launch: Callable) -> Callable:
    """What `kernel[grid]` returns: Triton's own launcher, unless the arguments are on the simulated GPU."""

    def run(*args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, FakeTensor)]
        device = next((t.device.index or 0 for t in tensors if t.device.type == "cuda"), None)
        if device is None:
            return launch(*args, **kwargs)
        recorder.before_kernel(tensors, written=tensors)
        recorder.launch(launch_call(kernel, grid, args, kwargs), device)
        return None

    return run


def patch_kernel_interface(recorder: KernelRecorder, module: Any) -> None:
    """Make `kernel[grid]` of every Triton kernel class simulate launches on fake CUDA tensors."""
    interface = module.KernelInterface
    original = interface.__getitem__

    def getitem(self: Any, grid: Any) -> Callable:
        return simulated_launcher(recorder, self, grid, original(self, grid))

    interface.__getitem__ = getitem


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds `triton.runtime.jit` through the other finders, and patches it right after it executes."""

    def __init__(self, recorder: KernelRecorder) -> None:
        self.recorder = recorder

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != JIT_MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader, recorder = spec.loader, self.recorder
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch_kernel_interface(recorder, module)
            sys.meta_path.remove(self)

        loader.exec_module = exec_and_patch
        return spec


def install(recorder: KernelRecorder) -> None:
    """Note [Triton kernels]: patch Triton now if the program already imported it, else when it does."""
    module = sys.modules.get(JIT_MODULE)
    if module is not None:
        patch_kernel_interface(recorder, module)
    else:
        sys.meta_path.insert(0, _PatchOnImport(recorder))
