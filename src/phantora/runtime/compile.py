"""`torch.compile` runs the model eagerly under Phantora (dynamo cannot trace under a dispatch mode).

The compiled model on a real GPU fuses kernels and is usually faster than eager, so the
prediction is for eager execution; the summary says so.
"""

from __future__ import annotations

import torch

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from phantora.runtime.session import Session


def install_compile_fallback(session: Session) -> None:
    def compile(model=None, **kwargs):
        session.warn_once("torch.compile", "torch.compile is not simulated: the model runs eagerly, "
                                           "so predicted times are for eager PyTorch")
        if model is None:
            return lambda fn: fn
        return model

    torch.compile = compile
    torch.nn.Module.compile = lambda self, *args, **kwargs: compile(self)
