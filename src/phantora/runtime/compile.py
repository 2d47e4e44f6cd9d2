"""`torch.compile` under Phantora: PyTorch's own Dynamo, with Inductor run as far as its scheduler.

Note: [torch.compile under Phantora]
`torch.compile` is PyTorch's: it returns a real `OptimizedModule` (`_orig_mod`, state-dict keys prefixed with
`_orig_mod.`, attributes forwarded) or a compiled function; the decorator form, `fullgraph`, `dynamic`,
`mode`, `options`, `Module.compile()` and other backends behave as in PyTorch. Only the default backend,
`inductor`, is replaced by `SimulatedInductor` (runtime/inductor.py Note [Simulated Inductor]), given the
Inductor settings of the call's `mode` and `options` as torch translates them. Other backends (`eager`,
`aot_eager`, a program's own) run as they are: their ops are the eager ops, recorded one by one as on a GPU.

These let Dynamo trace a program while Phantora's dispatch mode is active:
- `HybridMode.ignore_compile_internals()`: Dynamo otherwise refuses to compile under a non-infrastructure
  dispatch mode; Dynamo's tracing itself runs on Dynamo's own fake tensors, which the mode passes through
  unrecorded (runtime/dispatch.py Note [Foreign fake modes]).
- Phantora's own modules are in Dynamo's skip list: Dynamo never compiles the dispatch mode's frames or
  Phantora's stand-ins for `torch.cuda`; a program that calls one of them inside a compiled region breaks the
  graph there, as any skipped function does. Two modules are left to trace, because a model calls them in
  its forward: `runtime/python_costs.py` (the charges of library calls) and `runtime/python_prices.py` (the charge
  at each entry of a priced library's functions, whose stand-in in a graph does nothing: compiled code runs none
  of their Python). One is skipped where it would start a frame and inlined where traced code calls it, as
  Dynamo treats `torch.nn`: `runtime/module_calls.py`, whose `Module._call_impl` charges a module call (nothing
  while Dynamo traces: compiled code makes no module calls; Note [Module calls on torch's fast path]).
- Phantora's `F.scaled_dot_product_attention` (runtime/sdpa.py, the kernel CUDA's selection would take) is
  allowed in the graph (`torch.compiler.allow_in_graph`): Dynamo records the call as is (it reads backend flags
  Dynamo cannot trace), and AOTAutograd traces through it to the chosen kernel, so the graph holds the
  attention kernel PyTorch's own selection puts there, when the region compiles, on a GPU.
- `torch.cuda._maybe_exchange_device` is a function of its own (runtime/cuda_api.py): Dynamo keys its
  handlers by function.
Dynamo compiles with the dispatch modes popped, yet runs some of the program's code for real while it traces: an
optimizer's `_init_group` makes the optimizer's state (on a GPU, real allocations that outlive the compilation).
Phantora's dispatch mode is therefore back on the stack while Dynamo compiles (`ModeWhileCompiling`, through
Dynamo's compilation callbacks), so that such tensors are the simulated device's; Dynamo's own tracing runs under
its fake mode, which the dispatch mode passes through.
And one lets Inductor's passes run: every fake mode but the simulated device's own avoids the CUDA device
(`FakeTensorMode.avoid_device_init`, true in PyTorch when no GPU is available): their constant propagation
would otherwise copy constants to the device for real (Inductor's pattern initialisation builds its example
inputs so), which no CUDA kernel of a CPU build can do.

This is done at the program's first `torch.compile` (importing Dynamo takes seconds).

Warnings come only where a region is compiled and cannot be simulated as Inductor's kernels (it then runs
eagerly, counted); a library that decorates functions at import compiles nothing until they are called.
Compilation time is not predicted: the summary says so when the program compiled something.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from phantora.runtime.inductor import SimulatedInductor

if TYPE_CHECKING:
    from phantora.runtime.dispatch import KernelRecorder
    from phantora.runtime.session import Session

TRACED_MODULES = ("python_costs.py", "python_prices.py")
"""Phantora's modules in `phantora/runtime/` that Dynamo traces (Note [torch.compile under Phantora])."""

INLINED_WHEN_CALLED = ("module_calls.py",)
"""Phantora's modules in `phantora/runtime/` that Dynamo inlines where traced code calls them, but never starts
compiling a frame in (Note [torch.compile under Phantora])."""


def install_compile(session: Session, recorder: KernelRecorder) -> None:
    """`torch.compile` with the simulated Inductor as its default backend (Note [torch.compile under Phantora])."""
    original = torch.compile

    @functools.wraps(original)
    def compile(model: Any = None, *, backend: Any = "inductor", mode: str | None = None,
                options: dict | None = None, dynamic: bool | None = None, **kwargs: Any) -> Any:
        prepare_dynamo()
        if backend is None or backend == "inductor":
            backend = simulated_inductor(session, recorder, mode, options, dynamic)
            mode = options = None
        return original(model, backend=backend, mode=mode, options=options, dynamic=dynamic, **kwargs)

    torch.compile = compile


def simulated_inductor(session: Session, recorder: KernelRecorder, mode: str | None, options: dict | None,
                       dynamic: bool | None) -> SimulatedInductor:
    """The backend for one `torch.compile` call; `mode` and `options` checked and translated by torch's own
    Inductor wrapper (an unknown mode or option fails as in PyTorch)."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    wrapper = torch._TorchCompileInductorWrapper(mode or "default", dict(options) if options else None, dynamic)
    return SimulatedInductor(session, recorder, dict(wrapper.config), mode)


@functools.cache
def prepare_dynamo() -> None:
    """Let Dynamo and Inductor work under Phantora (Note [torch.compile under Phantora]); at the program's first
    `torch.compile`, as Dynamo takes seconds to import."""
    from phantora.runtime import sdpa
    from phantora.runtime.dispatch import RecordingFakeMode

    skip_phantora_in_dynamo()
    other_fake_modes_avoid_the_device(RecordingFakeMode)
    mode = _hybrid_mode()
    if mode is not None:
        while_compiling = ModeWhileCompiling(mode)
        torch._dynamo.callback_handler.register_start_callback(while_compiling.start)
        torch._dynamo.callback_handler.register_end_callback(while_compiling.end)
    routed = torch.nn.functional.scaled_dot_product_attention
    if getattr(routed, "__module__", None) == sdpa.__name__:
        torch.compiler.allow_in_graph(routed)


def _hybrid_mode() -> Any:
    """Phantora's dispatch mode, on the stack where the program calls `torch.compile`; None outside a rank."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from phantora.runtime.dispatch import HybridMode

    return next((m for m in _get_current_dispatch_mode_stack() if isinstance(m, HybridMode)), None)


class ModeWhileCompiling:
    """Puts Phantora's dispatch mode back on the stack while Dynamo compiles (Note [torch.compile under Phantora]),
    unless it is there already (a backward compiled lazily, inside the program's own dispatch)."""

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.pushed: list[bool] = []

    def start(self, args: Any) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        push = self.mode not in _get_current_dispatch_mode_stack()
        if push:
            self.mode.__enter__()
        self.pushed.append(push)

    def end(self, args: Any) -> None:
        if self.pushed.pop():
            self.mode.__exit__(None, None, None)


def other_fake_modes_avoid_the_device(own: type) -> None:
    """Fake modes other than `own` (the simulated device's) never run CUDA ops for real (Note [torch.compile
    under Phantora])."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = FakeTensorMode.avoid_device_init.fget
    FakeTensorMode.avoid_device_init = property(lambda mode: original(mode) if isinstance(mode, own) else True)


def skip_phantora_in_dynamo() -> None:
    """Put Phantora's modules, but `TRACED_MODULES`, in Dynamo's skip list (by file: a package's `__init__.py`
    would put its whole directory there), and let traced code call into `INLINED_WHEN_CALLED`."""
    from torch._dynamo import trace_rules

    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py" or (path.parent.name == "runtime" and path.name in TRACED_MODULES):
            continue
        trace_rules.SKIP_DIRS.append(str(path))
        if path.parent.name == "runtime" and path.name in INLINED_WHEN_CALLED:
            trace_rules.BUILTIN_INLINE_WHEN_CALLED.add(str(path))
    trace_rules._recompile_re()
