"""Who issued an op that runs during the backward pass: the autograd engine, or Python code it called.

Note: [Python in the backward pass]
The host model charges an op issued from Python `framework_ns` on top of its dispatch and launch (the Python
binding and the statements around it), and an op the autograd engine issues from a node's C++ only its dispatch
and launch (models/host.py). During the backward pass both happen: the engine runs C++ nodes (`MmBackward0`),
but it also calls Python — the `backward` of a custom `torch.autograd.Function` (Megatron's tensor-parallel
linear layers and its region mappings, DeepSpeed's ZeRO-3 module functions) and the hooks registered on
tensors, nodes and gradient accumulators (Megatron's and DeepSpeed's gradient buckets). An op issued there
goes through the Python binding exactly as in the forward pass. The autograd node that is running does not
tell them apart (a hook runs while its node is current), the Python stack does: below the interception layer,
an op the engine issues has no Python frame of the program (the engine's device thread has none; on the
thread that called `backward()`, the next frame is PyTorch's `_engine_run_backward`), while a Python-issued op
has the frame of the statement that issued it.

PyTorch's own Python in the backward pass (DTensor's redistribution, FSDP2's post-backward, the functional
collectives' backward) keeps the engine's charge: the host model charges it through its own library terms
(`subclass_backward_op_ns`, `library_call_ns`), which were measured with these ops inside them.
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType

import phantora
import torch

_PHANTORA = os.path.dirname(os.path.abspath(phantora.__file__)) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TORCH_DISPATCH = tuple(_TORCH + os.path.join(*path) for path in (
    ("_dynamo", "eval_frame.py"), ("_compile.py",),  # the dynamo-disabling wrapper around a `__torch_dispatch__`
    ("utils", "_python_dispatch.py"),
    ("_ops.py",),  # `torch.ops.aten.x(...)` called from Python: its caller is the issuer
    ("_subclasses", "fake_tensor.py"), ("utils", "_stats.py"),  # FakeTensorMode, inside which Phantora records
))
"""PyTorch's files that an op passes through between the statement that issues it and Phantora's recorder."""

PASS, ENGINE, PYTHON = 0, 1, 2
"""What a frame says about the op being dispatched: part of its dispatch or Phantora's own (look further out),
PyTorch's own Python or the engine's entry (engine charge), or the program's Python (Python charge)."""

_kinds: dict[int, tuple[CodeType, int]] = {}
"""Each code object's kind, by id (a code object's own hash is computed from its contents on every call); the
code object is kept to tell a reused id apart."""


def frame_kind(code: CodeType) -> int:
    """PASS, ENGINE or PYTHON for a frame running `code`, by the file it comes from."""
    cached = _kinds.get(id(code))
    if cached is not None and cached[0] is code:
        return cached[1]
    filename = os.path.abspath(code.co_filename)
    if filename.startswith(_PHANTORA) or filename.startswith(_TORCH_DISPATCH):
        kind = PASS
    elif filename.startswith(_TORCH):
        kind = ENGINE
    else:
        kind = PYTHON
    _kinds[id(code)] = (code, kind)
    return kind


def issuing_frame(frame: FrameType | None) -> FrameType | None:
    """The frame of the statement that issued the op being dispatched, looking outward from `frame` past the op's
    dispatch and Phantora's own frames; None where no Python issued it (the engine's device thread)."""
    while frame is not None and frame_kind(frame.f_code) == PASS:
        frame = frame.f_back
    return frame


def issued_from_python(frame: FrameType | None = None) -> bool:
    """Whether the op being dispatched on this thread was issued by the program's Python, not by the autograd
    engine or PyTorch's own Python (`frame`: where to start looking outward, the caller's by default)."""
    issuer = issuing_frame(sys._getframe(1) if frame is None else frame)
    return issuer is not None and frame_kind(issuer.f_code) == PYTHON
