"""What the compute and host cost models are given about one intercepted operator call.

The rank runtime turns each GPU op into an `OpCall`: the op's name, its arguments with every
tensor replaced by a `TensorMeta`, and the metadata of its outputs. Nothing here touches torch
state, so an `OpCall` can be hashed (cost caching), pickled (sent to a coordinator) and built by
hand in tests.

Note: [Ops without elements]
PyTorch's CUDA ops return before launching anything when there is nothing to compute: TensorIterator's
kernels (elementwise ops, copies, fills, random) at `iter.numel() == 0`, `copy_` before it stages or
synchronizes (Copy.cpp `copy_impl`), `cat` of empty tensors, a multi-tensor apply over empty tensors. So an op
whose tensors all have no element runs no kernel and, being a copy between host and device, makes the host wait
for nothing. Hugging Face's `DynamicCache` does this in every layer's forward (`torch.tensor([],
device=...)`, the host-to-device copy of an empty list). The host still pays the op's dispatch, as it does for
any op (models/host.py `op_ns`, launch included: the launch alone was not measured apart). Only where the
inputs are empty too: an op that reads elements may compute before it knows it returns none (`nonzero` counts
on the GPU), and one that returns none of a non-empty input is rare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape, dtype and layout of a tensor argument or result (no data)."""

    shape: tuple[int, ...]
    dtype: str
    """torch dtype name without the prefix: "bfloat16", "float32", "int64", ..."""
    stride: tuple[int, ...]
    device: str = "cuda"
    """"cuda" or "cpu": needed to tell host-to-device from device-to-device copies."""
    storage_offset: int = 0
    """Elements between the start of the storage and the tensor's first element. Not part of a
    database signature; `phantora profile` uses it to rebuild a view with the same alignment."""

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class OpCall:
    """One call of an aten operator, as the GPU would see it."""

    name: str
    """Overload name as `str(torch.ops.aten.mm.default)` prints it: "aten.mm.default"."""
    args: tuple[Any, ...]
    """Positional arguments; tensors are `TensorMeta`, lists become tuples, other values as given."""
    kwargs: tuple[tuple[str, Any], ...]
    """Keyword arguments as sorted (name, value) pairs, converted like `args`."""
    outputs: tuple[TensorMeta, ...]

    def tensor_inputs(self) -> list[TensorMeta]:
        """Every `TensorMeta` among args and kwargs, in order (nested tuples included)."""
        return tensors_in((self.args, tuple(v for _, v in self.kwargs)))


def tensors_in(value: Any) -> list[TensorMeta]:
    """Every `TensorMeta` in a value, in order, nested tuples included."""
    found: list[TensorMeta] = []

    def visit(v: Any) -> None:
        if isinstance(v, TensorMeta):
            found.append(v)
        elif isinstance(v, tuple):
            for item in v:
                visit(item)

    visit(value)
    return found


def touches_no_element(op: OpCall) -> bool:
    """Whether the op has tensors and none of them, inputs or outputs, holds an element: it launches no kernel
    (Note [Ops without elements])."""
    outputs = op.outputs
    inputs = op.tensor_inputs()
    if not outputs and not inputs:
        return False
    return not any(t.numel for t in outputs) and not any(t.numel for t in inputs)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a row-major tensor of `shape`, as PyTorch gives them (an empty dimension counts as 1)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def is_contiguous(t: TensorMeta) -> bool:
    """Whether the tensor is laid out row-major without gaps (size-1 dimensions may have any stride)."""
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


KernelClass = Literal[
    "gemm", "attention", "elementwise", "reduction", "norm", "foreach", "copy",
    "memset", "embedding", "index", "loss", "random", "other",
]


@dataclass(frozen=True, slots=True)
class KernelEstimate:
    """The cost model's answer for one `OpCall`."""

    duration_ns: int
    flops: float
    bytes_moved: float
    kernel_class: KernelClass
    source: Literal["measured", "analytic", "generic"]
    """"generic": the op has no specific model and got a memory-bound estimate; it is counted
    and listed in the summary (and an error under --strict)."""
