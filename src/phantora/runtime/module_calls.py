"""The host time of an `nn.Module` call, charged by `Module._call_impl` itself.

Note: [Module calls on torch's fast path]
Every `nn.Module` call costs the host `module_call_ns` (models/host.py), charged as `Module._call_impl` starts:
before the module's forward pre-hooks (FSDP2's all-gathers) and its `forward`. A global forward pre-hook would
charge it there, but `_call_impl` goes straight to `forward` only while no hook of any kind is set, the module's
own or a global one: a single global hook puts every call of every module on the path that collects and runs
hooks, 1.3 µs more of a rank's CPU per call (docs/runtime.md, "The simulator's own cost per op"). So a wrapper of
`Module._call_impl` charges, then calls torch's own, which takes the fast path where the module has no hooks of its
own. `Module.__call__` (torch's `_wrapped_call_impl`) calls `_call_impl` by name, and so does `torch.fx`'s symbolic
tracing through it.

The wrapper charges the calls a global pre-hook that checks `torch.compiler.is_compiling()` charged:
- every call that runs `Module._call_impl`, a nested module's included; a subclass that overrides `__call__`
  is charged if its `__call__` calls `super().__call__` (no module of torch's overrides it);
- none while Dynamo traces or compiles (`torch.compiler.is_compiling()`): compiled code makes no module calls;
- none while Dynamo's frame evaluation is on, outside the frames it traces: the module that `torch.compile(module)`
  calls, a module compiled in place (`Module.compile()`), a module called at a graph break or from code Dynamo
  skips. Dynamo compiles a Python hook's own frame there, with `is_compiling()` true, so such a hook charges
  nothing; the compiled call's own host costs (`compiled_call_ns`, fitted against runs that charge so:
  benchmarks/host/fit_compiled.py) stand for that Python. The `OptimizedModule` that `torch.compile(module)`
  returns is called before the frame evaluation starts, and is charged, and so are the module calls of a function
  under `torch.compiler.disable`, which turns it off;
- none in a process forked from a rank (the charge's own check).

Dynamo treats the wrapper as it treats torch's `_call_impl`: this file is skipped where a call would start a frame
to compile (the module that `torch.compile(module)` calls: its hooks run eagerly, its `forward` is compiled) and
inlined where traced code calls a module (runtime/compile.py `skip_phantora_in_dynamo`); the wrapper keeps torch's
name, `_call_impl`, which Dynamo looks for when it wraps a callable to compile. A rank imports Dynamo before the
install (runtime/cuda_api.py), so Dynamo does not take the wrapper for torch's own `_call_impl` and traces a module
call through `Module.__call__`, the wrapper and torch's `_call_impl` rather than straight into `forward`: the same
graphs. They are PyTorch's own, a module's parameters lifted before its input; a global module hook would have
Dynamo trace each call through the hooks' path, which lifts the input first, and the order of a graph's inputs can
order a kernel's arguments, or two independent kernels, otherwise.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch._C._dynamo.eval_frame import get_eval_frame_callback


def charge_module_calls(charge: Callable[[], None]) -> None:
    """Call `charge()` as every `nn.Module` call starts (Note [Module calls on torch's fast path])."""
    torch.nn.Module._call_impl = charged_call(torch.nn.Module._call_impl, charge)


def charged_call(call: Callable[..., Any], charge: Callable[[], None]) -> Callable[..., Any]:
    """`Module._call_impl` that calls `charge()` first, unless Dynamo is compiling or its frame evaluation is on."""

    @functools.wraps(call)
    def _call_impl(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling() and get_eval_frame_callback() is None:
            charge()
        return call(self, *args, **kwargs)

    return _call_impl
