"""Libraries' probes for tracing answer for a simulated GPU tensor as they would for a real one.

Note: [Library probes for tracing]
Libraries ask whether a tensor is a FakeTensor to tell tracing (torch.compile, torch.export) from an eager
run, and take another path when it is. Hugging Face Transformers, seeing a fake tensor, gives up reading
the values that let it skip the attention mask (`is_tracing`: a packed-sequence check, a padding check):
a Llama's SDPA then ran with a materialised bool mask and grouped key/value heads repeated, about 6 % of
a step more than the `is_causal` path a GPU takes. A simulated GPU tensor is a FakeTensor only because that
is how Phantora holds GPU tensors; to the program it is an ordinary GPU tensor, so these probes answer "not
fake" for tensors of Phantora's own fake mode, and still "fake" for a library's own tracing (another mode).
The probes are patched when their module is imported (`after_import`).
"""

from __future__ import annotations

from typing import Callable

from torch._subclasses.fake_tensor import FakeTensor

from phantora.runtime.import_hooks import after_import


def is_tracing_fake(x: object, ours: type) -> bool:
    """Whether `x` is a fake tensor of some tracing, not a simulated GPU tensor (of the fake mode class `ours`)."""
    return isinstance(x, FakeTensor) and not isinstance(x.fake_mode, ours)


def _patch_transformers(module, ours: type) -> None:
    module.is_fake_tensor = lambda x: is_tracing_fake(x, ours)


PROBES: dict[str, Callable] = {
    "transformers.utils.import_utils": _patch_transformers,
}
"""Modules with a probe for fake tensors -> how to patch it (given the module and Phantora's fake mode class)."""


def install_library_probes(fake_mode_class: type) -> None:
    """Note [Library probes for tracing]."""
    for name, patch in PROBES.items():
        after_import(name, lambda module, patch=patch: patch(module, fake_mode_class))
