"""Who issued an op of the backward pass: the autograd engine's C++, or Python it called (runtime/issuer.py)."""

from __future__ import annotations

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from phantora.runtime.issuer import issued_from_python


class _Issuers(TorchDispatchMode):
    """Notes, for each op run while an autograd node is current, whether Python issued it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        node = torch._C._current_autograd_node()
        if node is not None:
            # start above this frame: the mode stands for Phantora's own, which the walk steps over
            self.seen.append((type(node).__name__, func.__name__, issued_from_python(sys._getframe(1))))
        return func(*args, **(kwargs or {}))


class _TimesTwo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad.mul(2)


def _add_one(param: torch.Tensor) -> None:
    param.grad.add_(1)


def _backward_issuers() -> list[tuple[str, str, bool]]:
    x = torch.randn(4, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    w.register_post_accumulate_grad_hook(_add_one)
    with _Issuers() as mode:
        _TimesTwo.apply(x @ w).sum().backward()
    return mode.seen


def test_ops_of_the_engines_own_nodes_are_the_engines() -> None:
    seen = _backward_issuers()
    engine = [(op, python) for node, op, python in seen if node == "MmBackward0"]
    assert engine and not any(python for _, python in engine)


def test_a_custom_functions_backward_and_a_hook_issue_from_python() -> None:
    seen = _backward_issuers()
    assert ("_TimesTwoBackward", "mul.Tensor", True) in seen
    assert ("AccumulateGrad", "add_.Tensor", True) in seen  # the hook runs while its node is current
    assert ("AccumulateGrad", "detach.default", False) in seen  # the accumulation itself is the engine's
