"""Rebuild a recorded op as a real call: the overload, and inputs of the recorded shapes, dtypes,
strides and storage offsets holding random values that the op accepts.

Note: [Values of rebuilt inputs]
Kernel time depends on shapes and layouts, rarely on values, but some ops need values in a range
to run at all or to run the usual path:
- index tensors must be in range: embedding indices < num_embeddings, nll_loss targets < classes,
  gather/scatter/index_select indices < the indexed dim, `index`/`index_put` indices < their dim;
  other integer tensors get values in [0, smallest dim of the op's floating inputs), which indexes
  any of its dims;
- floats are standard normal, except for ops defined on part of the line: positive (0.5..1.5) for
  sqrt, log and friends and for fused optimizers (their second moments and step counts), (-0.9..0.9)
  for erfinv/asin/acos/atanh, probabilities (0.1..0.9) for bernoulli, multinomial, logit, binary
  cross-entropy;
- bool tensors are fair coin flips.
The random generator is seeded per op from its signature, so a rebuild is reproducible.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import torch

from phantora.models.compute import FREE_OPS, packet_name
from phantora.models.opcall import signature
from phantora.models.ops import OpCall, TensorMeta


class RebuildError(Exception):
    """The op cannot be rebuilt; the message is the reason, listed by `phantora profile`."""


_POSITIVE = {
    "aten.sqrt", "aten.sqrt_", "aten.rsqrt", "aten.rsqrt_", "aten.log", "aten.log_", "aten.log2", "aten.log10",
    "aten.log1p", "aten.pow", "aten.pow_", "aten.lgamma", "aten.digamma", "aten.polygamma", "aten.mvlgamma",
    "aten.reciprocal", "aten.reciprocal_", "aten._foreach_sqrt", "aten._foreach_sqrt_", "aten._foreach_log",
    "aten._foreach_log_", "aten._foreach_pow", "aten._foreach_pow_", "aten._foreach_reciprocal",
    "aten._foreach_reciprocal_", "aten._foreach_rsqrt", "aten._foreach_rsqrt_", "aten.xlogy",
    "aten._fused_adam_", "aten._fused_adamw_", "aten._fused_adam", "aten._fused_adamw", "aten._fused_sgd_",
    "aten._fused_sgd", "aten._fused_adagrad_", "aten._fused_adagrad", "aten.log_normal_",
}
_BOUNDED = {"aten.erfinv", "aten.erfinv_", "aten.asin", "aten.acos", "aten.atanh", "aten.asin_", "aten.acos_"}
_PROBABILITY = {"aten.bernoulli", "aten.bernoulli_", "aten.multinomial", "aten.logit", "aten.logit_",
                "aten.binary_cross_entropy", "aten.binary_cross_entropy_backward"}
_INDEX_DIM_OPS = {"aten.index_select", "aten.gather", "aten.scatter", "aten.scatter_", "aten.scatter_add",
                  "aten.scatter_add_", "aten.scatter_reduce", "aten.scatter_reduce_", "aten.index_add",
                  "aten.index_add_", "aten.index_copy", "aten.index_copy_", "aten.index_fill",
                  "aten.index_fill_"}
_INDEX_LIST_OPS = {"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_",
                   "aten._unsafe_index", "aten._unsafe_index_put"}
_NLL = {"aten.nll_loss_forward", "aten.nll_loss2d_forward", "aten.nll_loss_backward", "aten.nll_loss2d_backward"}

Fill = tuple  # ("normal",) | ("uniform", lo, hi) | ("int", lo, hi)


def resolve_overload(name: str) -> torch._ops.OpOverload:
    """"aten.mm.default" -> torch.ops.aten.mm.default."""
    try:
        ns, rest = name.split(".", 1)
        packet, _, overload = rest.rpartition(".")
        if not packet:
            packet, overload = rest, "default"
        return getattr(getattr(getattr(torch.ops, ns), packet), overload)
    except (AttributeError, RuntimeError, ValueError):
        raise RebuildError(f"this PyTorch has no operator {name}") from None


def measurable(op: OpCall) -> bool:
    """Whether the op launches GPU work worth measuring: not a view/allocation/profiler op (those cost 0
    by design), and on a CUDA device."""
    if packet_name(op.name) in FREE_OPS:
        return False
    return any(t.device.startswith("cuda") for t in (*op.tensor_inputs(), *op.outputs)) or \
        any(isinstance(v, str) and v.startswith("cuda") for _, v in op.kwargs)


@dataclass(slots=True)
class RebuiltOp:
    """A ready-to-run call; `run()` executes the op once."""

    op: OpCall
    overload: torch._ops.OpOverload
    args: list[Any]
    kwargs: dict[str, Any]

    def run(self) -> Any:
        return self.overload(*self.args, **self.kwargs)


def rebuild(op: OpCall, device: str | torch.device) -> RebuiltOp:
    """Real inputs for `op` on `device` (recorded CUDA tensors go there; CPU tensors stay on the CPU).
    Raises RebuildError with the reason when it cannot."""
    device = torch.device(device)
    overload = resolve_overload(op.name)
    schema = overload._schema.arguments
    if len(op.args) > len(schema):
        raise RebuildError(f"{len(op.args)} positional arguments for a schema of {len(schema)}")
    kinds = {a.name: str(a.type) for a in schema}
    names = [a.name for a in schema[:len(op.args)]]
    named: dict[str, Any] = dict(zip(names, op.args))
    for k, v in op.kwargs:
        if k not in kinds:
            raise RebuildError(f"argument {k!r} is not in the schema of {op.name}")
        named[k] = v
    fills = _fills(op, named)
    gen = _Generators(zlib.crc32(signature(op).encode()))
    built = {k: _build(v, kinds[k], device, fills.get(k, fills["*"]), gen, (k,), fills) for k, v in named.items()}
    args = [built[n] for n in names]
    kwargs = {k: built[k] for k, _ in op.kwargs}
    return RebuiltOp(op, overload, args, kwargs)


def _fills(op: OpCall, named: dict[str, Any]) -> dict[Any, Fill]:
    """How to fill each tensor argument (Note [Values of rebuilt inputs]); "*" is the default."""
    p = packet_name(op.name)
    floats = [t for t in op.tensor_inputs() if _is_float(t.dtype)]
    dims = [d for t in floats for d in t.shape if d > 0]
    bound = min(dims) if dims else 2
    fills: dict[Any, Fill] = {"*": ("normal",), "int": ("int", 0, bound)}
    if p in _POSITIVE:
        fills["*"] = ("uniform", 0.5, 1.5)
    elif p in _BOUNDED:
        fills["*"] = ("uniform", -0.9, 0.9)
    elif p in _PROBABILITY:
        fills["*"] = ("uniform", 0.1, 0.9)

    def size(t: Any, dim: int) -> int:
        if not isinstance(t, TensorMeta):
            raise RebuildError("index rule: the indexed argument is not a tensor")
        if not t.shape:
            return 1
        return t.shape[dim % len(t.shape)]

    if p == "aten.embedding":
        fills["indices"] = ("int", 0, size(named.get("weight"), 0))
    elif p == "aten.embedding_dense_backward":
        fills["indices"] = ("int", 0, int(named.get("num_weights", bound)))
    elif p in _NLL:
        x = named.get("self")
        classes = size(x, 1) if isinstance(x, TensorMeta) and len(x.shape) >= 2 else size(x, 0)
        fills["target"] = ("int", 0, classes)
    elif p in _INDEX_DIM_OPS:
        fills["index"] = ("int", 0, size(named.get("self"), int(named.get("dim", 0))))
    elif p == "aten.take":
        x = named.get("self")
        fills["index"] = ("int", 0, max(1, x.numel if isinstance(x, TensorMeta) else 1))
    elif p in _INDEX_LIST_OPS:
        x = named.get("self")
        for i, _ in enumerate(named.get("indices") or ()):
            fills[("indices", i)] = ("int", 0, size(x, i))
    return fills


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise RebuildError(f"unknown dtype {name!r}")
    return d


def _target(device_str: str, device: torch.device) -> torch.device:
    """Where a recorded device goes: every CUDA device to the measuring device, the CPU stays."""
    kind = device_str.split(":")[0]
    if kind == "cuda":
        return device
    if kind == "cpu":
        return torch.device("cpu")
    raise RebuildError(f"cannot rebuild a tensor on device {device_str!r}")


def _build(v: Any, kind: str, device: torch.device, fill: Fill, gen: _Generators, path: tuple,
           fills: dict[Any, Fill]) -> Any:
    if isinstance(v, TensorMeta):
        if not _is_float(v.dtype) and v.dtype != "bool":
            fill = fills.get(path if len(path) > 1 else path[0], fills["int"])
            if fill[0] != "int":
                fill = fills["int"]
        return make_tensor(v, device, fill, gen)
    if isinstance(v, tuple):
        return [_build(x, kind, device, fill, gen, (path[0], i), fills) for i, x in enumerate(v)]
    if isinstance(v, str):
        if "str" in kind:
            return v
        if "Generator" in kind or v.startswith("<"):
            return None
        if v.startswith("torch."):  # layouts and memory formats print as torch.strided, torch.contiguous_format
            value = getattr(torch, v.removeprefix("torch."), None)
            if value is None:
                raise RebuildError(f"unknown value {v!r}")
            return value
        if v.split(":")[0] in ("cuda", "cpu", "meta"):
            return _target(v, device)
        return _dtype(v)
    return v


def make_tensor(meta: TensorMeta, device: torch.device, fill: Fill = ("normal",),
                gen: "_Generators | None" = None) -> torch.Tensor:
    """A tensor with `meta`'s shape, dtype, stride and storage offset, its storage filled per `fill`."""
    dtype = _dtype(meta.dtype)
    dev = _target(meta.device, device)
    if len(meta.shape) != len(meta.stride):
        raise RebuildError(f"shape {meta.shape} and stride {meta.stride} differ in length")
    if any(s == 0 for s in meta.shape):
        n = meta.storage_offset
    else:
        n = meta.storage_offset + 1 + sum((s - 1) * abs(st) for s, st in zip(meta.shape, meta.stride))
    base = torch.empty(max(n, 1), dtype=dtype, device=dev)
    _fill(base, fill, gen)
    return base.as_strided(meta.shape, meta.stride, meta.storage_offset)


def _fill(t: torch.Tensor, fill: Fill, gen: "_Generators | None") -> None:
    """Fill a 1-D tensor in place on its device, from a seeded generator of that device."""
    g = gen.on(t.device) if gen is not None else None
    floating = t.dtype.is_floating_point or t.dtype.is_complex
    if t.dtype == torch.bool:
        kind, lo, hi = "int", 0, 2
    elif fill[0] == "int" or not floating:
        kind, lo, hi = ("int", fill[1], fill[2]) if fill[0] == "int" else ("int", 0, 2)
        if not floating:
            hi = min(hi, int(torch.iinfo(t.dtype).max) + 1)
        hi = max(hi, lo + 1)
    else:
        kind, lo, hi = fill[0], 0, 0
    try:
        _fill_direct(t, kind, fill, lo, hi, g)
    except (RuntimeError, NotImplementedError):  # a dtype the random kernels lack (fp8, uint64): draw wider, cast
        wide = torch.empty(t.shape, dtype=torch.int64 if kind == "int" else torch.float32, device=t.device)
        _fill_direct(wide, kind, fill, lo, hi, g)
        t.copy_(wide)


def _fill_direct(t: torch.Tensor, kind: str, fill: Fill, lo: int, hi: int, g: torch.Generator | None) -> None:
    if kind == "int":
        t.random_(lo, hi, generator=g)
    elif kind == "uniform":
        t.uniform_(fill[1], fill[2], generator=g)
    else:
        t.normal_(generator=g)


class _Generators:
    """One seeded generator per device an op's inputs live on (values are drawn where they live)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._by_device: dict[str, torch.Generator] = {}

    def on(self, device: torch.device) -> torch.Generator:
        key = str(device)
        g = self._by_device.get(key)
        if g is None:
            g = torch.Generator(device=device)
            g.manual_seed(self.seed)
            self._by_device[key] = g
        return g
