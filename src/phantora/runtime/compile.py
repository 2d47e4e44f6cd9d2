"""`torch.compile` runs the model eagerly under Phantora (dynamo cannot trace under a dispatch mode).

The compiled model on a real GPU fuses kernels and is usually faster than eager, so the
prediction is for eager execution; the summary says so.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from phantora.runtime.session import Session


def install_compile_fallback(session: Session) -> None:
    """`torch.compile` returns what it is given, to run eagerly; the warning comes when something compiled is
    used: a module when it is compiled, a function when it is first called (libraries compile helpers at
    import, such as TorchTitan's flex attention, which a model may never call)."""

    def warn() -> None:
        session.warn_once("torch.compile", "torch.compile is not simulated: the model runs eagerly, "
                                           "so predicted times are for eager PyTorch")

    def eager(fn):
        if isinstance(fn, torch.nn.Module):
            warn()
            return fn

        @functools.wraps(fn)
        def run_eagerly(*args, **kwargs):
            warn()
            return fn(*args, **kwargs)

        return run_eagerly

    def compile(model=None, **kwargs):
        if model is None:
            return eager
        return eager(model)

    torch.compile = compile
    torch.nn.Module.compile = lambda self, *args, **kwargs: warn()
