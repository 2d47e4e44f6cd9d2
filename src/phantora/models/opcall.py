"""The one JSON encoding of an `OpCall`, and the database key derived from a call.

**The record** (`encode_op` / `decode_op`): one call written with enough detail to rebuild it on a real GPU
(`phantora profile`) or to cost it again (the measurement scripts under benchmarks/kernels/). It is what
`<out>/ops.jsonl` (profiler/oplog.py), the on-the-fly profiler's requests and the measured-op files under
data/<gpu>/kernels/ hold:

    {"op": "aten.mm.default", "args": [...], "kwargs": [[name, value], ...], "outputs": [...]}

A tensor is `{"T": [shape, dtype, stride, device]}`, plus `"off": n` when its storage offset is not 0; a run
of more than 4 equal items is `{"rep": [n, item]}`; tuples are lists; ints, floats, bools, None and strings
(dtype names, device strings, "torch.strided") are themselves; anything else is its `str`. Decoding gives
what the runtime itself builds (runtime/dispatch.py `make_op_call`): a dtype is its name ("bfloat16"), a
device its string. It also reads the forms older measurement files use: the call's name under "name", a
float as `{"f": x}`, `{"dtype": name}`, `{"device": type}`, `{"repr": text}`, and outputs nested in lists.

**The signature** (`signature`, `loose_signature`): the kernel database's key (kernels.jsonl's "sig"),
a canonical JSON text of the things that choose the kernel: the op's name, each tensor's shape, dtype,
stride and device type, the non-float arguments. Storage offsets, float values and device indices are
left out, so calls that run the same kernel share a key.
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch

from phantora.models.ops import OpCall, TensorMeta, is_contiguous, tensors_in

_REPEAT_AFTER = 4
"""A record writes a run of more than this many equal items once, with its count (a foreach op's lists)."""


# ----------------------------------------------------------------------------- the record


def encode_value(value: Any) -> Any:
    """One argument, output or keyword value of an `OpCall` as JSON-ready data."""
    if isinstance(value, TensorMeta):
        tensor: dict[str, Any] = {"T": [list(value.shape), value.dtype, list(value.stride), value.device]}
        if value.storage_offset:
            tensor["off"] = value.storage_offset
        return tensor
    if isinstance(value, (tuple, list)):
        items = [encode_value(x) for x in value]
        if len(items) > _REPEAT_AFTER and all(x == items[0] for x in items):
            return {"rep": [len(items), items[0]]}
        return items
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return str(value)


def decode_value(value: Any) -> Any:
    """The `OpCall` value that `encode_value` (or an older measurement file) wrote."""
    if isinstance(value, list):
        return tuple(decode_value(x) for x in value)
    if not isinstance(value, dict):
        return value
    if "T" in value:
        shape, dtype, stride, device = value["T"]
        return TensorMeta(tuple(shape), dtype, tuple(stride), device, int(value.get("off", 0)))
    if "rep" in value:
        count, item = value["rep"]
        return (decode_value(item),) * count
    if "f" in value:
        return float(value["f"])
    for plain in ("dtype", "device", "repr"):
        if plain in value:
            return value[plain]
    raise ValueError(f"unknown encoded value {value!r}")


def encode_op(op: OpCall) -> dict[str, Any]:
    """The record of one call: {"op", "args", "kwargs", "outputs"}."""
    return {"op": op.name, "args": encode_value(op.args), "kwargs": [[k, encode_value(v)] for k, v in op.kwargs],
            "outputs": encode_value(op.outputs)}


def decode_op(record: dict[str, Any]) -> OpCall:
    """The `OpCall` a record describes; other fields of the record (counts, timings) are ignored."""
    name = record["op"] if "op" in record else record["name"]
    return OpCall(name=name, args=decode_value(record["args"]),
                  kwargs=tuple((k, decode_value(v)) for k, v in record.get("kwargs", [])),
                  outputs=tuple(tensors_in(decode_value(record.get("outputs", [])))))


# ----------------------------------------------------------------------------- the signature


_DEVICE_STR = re.compile(r"^(cuda|cpu|meta):\d+$")
"""Device strings lose their index in signatures: cuda:3 runs the same kernel as cuda:0."""
_RUN_AFTER = 3
"""A signature writes a run of more than this many equal items once, with its count."""


def _canonical(value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return ["T", list(value.shape), value.dtype, list(value.stride), value.device.split(":")[0]]
    if isinstance(value, str):
        return _DEVICE_STR.sub(r"\1", value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return "<float>"
    if isinstance(value, (tuple, list)):
        return _run_length([_canonical(x) for x in value])
    if isinstance(value, torch.dtype):  # the runtime passes dtypes as their names: same key either way
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.device):
        return value.type
    return _DEVICE_STR.sub(r"\1", str(value))


def _run_length(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    i = 0
    while i < len(items):
        j = i
        while j < len(items) and items[j] == items[i]:
            j += 1
        out.extend([["rep", j - i, items[i]]] if j - i > _RUN_AFTER else items[i:j])
        i = j
    return out


def _loosened(value: Any) -> Any:
    if isinstance(value, list):
        if len(value) == 3 and value[0] == "rep":
            return ["rep", value[1], _loosened(value[2])]
        if len(value) == 5 and value[0] == "T":
            tensor = TensorMeta(tuple(value[1]), value[2], tuple(value[3]), value[4])
            return ["T", value[1], value[2], "c" if is_contiguous(tensor) else "n", value[4]]
        return [_loosened(x) for x in value]
    return value


def signature(op: OpCall) -> str:
    """Exact database key: op name, tensors (shape, dtype, stride, device), non-float arguments.
    Keyword arguments that are floats or None are left out (eager PyTorch passes `scale=None`
    or a float where Phantora's runtime may pass nothing; neither changes the kernel)."""
    kwargs = [(k, v) for k, v in op.kwargs if v is not None and not isinstance(v, float)]
    return json.dumps([op.name, _canonical(op.args), _canonical(kwargs)], separators=(",", ":"))


def loosen(sig: str) -> str:
    """A signature with each tensor's strides reduced to contiguous-or-not: the database's second key."""
    return json.dumps(_loosened(json.loads(sig)), separators=(",", ":"))


def loose_signature(op: OpCall) -> str:
    """Like `signature` with each tensor's strides reduced to contiguous-or-not."""
    return loosen(signature(op))
