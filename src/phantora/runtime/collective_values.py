"""Values that NCCL calls carry between ranks.

Note: [Values through collectives]
Programs decide small values on one rank and send them to the others through the GPU: a seed or a
flag broadcast from rank 0, a count all-reduced over the group (DeepSpeed ZeRO-3 broadcasts rank 0's
parameter counts and checks them on every rank; its overflow flag is an all-reduced maximum). A
placeholder on the receiving ranks, or their own value, would be wrong (rank 1 read -1 where rank 0
had sent 7). So a broadcast, all-reduce or all-gather of one GPU tensor of at most
`MAX_COMPUTED_SHADOW_BYTES` (the largest a shadow can be) carries values: when it is issued, each rank that contributes puts its input's values, as far as they
are known (Note [Shadow values]), into the group's c10d store, keyed by the group and the call's
sequence number; the results' shadows become `Pending` on the values every contributor put there,
combined as the collective combines them. A rank reads them only after its host has waited for the
result (a blocking read of the GPU), when every rank has issued the call and so has put its values
there: reading the store then never waits for another rank, which could be waiting for this one in
the coordinator (Note [Objects after a sync] in runtime/distributed.py). If any contributor's values
are unknown, so are the results: they read as placeholders.
"""

from __future__ import annotations

import functools
import pickle
from typing import Callable

import torch
import torch.distributed as dist

from phantora.runtime.shadows import MAX_COMPUTED_SHADOW_BYTES, Pending, shadows

Combine = Callable[[list[torch.Tensor]], list[torch.Tensor]]
"""The contributors' input values, in group-rank order -> this rank's result values, one per output."""

_REDUCTIONS: dict[object, Callable[[torch.Tensor], torch.Tensor]] = {
    dist.ReduceOp.SUM: lambda stacked: stacked.sum(0),
    dist.ReduceOp.AVG: lambda stacked: stacked.sum(0) / stacked.shape[0],
    dist.ReduceOp.PRODUCT: lambda stacked: stacked.prod(0),
    dist.ReduceOp.MAX: lambda stacked: stacked.amax(0),
    dist.ReduceOp.MIN: lambda stacked: stacked.amin(0),
}


def carries_values(inputs: list[torch.Tensor]) -> bool:
    """Whether a collective on `inputs` carries values: one small GPU tensor (every rank decides alike, from
    shapes the collective's ranks share)."""
    return (len(inputs) == 1 and inputs[0].device.type == "cuda"
            and inputs[0].numel() * inputs[0].element_size() <= MAX_COMPUTED_SHADOW_BYTES)


def exchange(store: dist.Store, key: str, me: int, contributors: list[int], inp: torch.Tensor,
             outputs: list[torch.Tensor], combine: Combine, *, read_from: list[int] | None = None) -> None:
    """Put this rank's values of `inp` under `key` (if it contributes) and make `outputs` pending on every
    contributor's values (group ranks), combined by `combine`. `read_from`: the group rank whose values
    stand for each contributor's (a mirror's are its representative's, protocol/symmetry.py)."""
    if me in contributors:
        store.set(f"{key}/{me}", _encode(shadows.lookup(inp, synced=False)))
    shadows.forget(outputs)  # until the results are known, what the GPU writes there is not (an input may be one)
    sources = tuple(contributors if read_from is None else read_from)
    results = Pending(functools.partial(_combined, store, key, sources, combine))
    for i, out in enumerate(outputs):
        shadows.set_pending(out, Pending(functools.partial(_nth, results, i, tuple(out.shape), out.dtype)))


def broadcast(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """The root is the only contributor: every rank receives its values."""
    return [values[0]]


def all_reduce(op: object, dtype: torch.dtype) -> Combine:
    """`op`: a `ReduceOp` (what c10d passes in its options) or its `RedOpType`."""
    reduce = _REDUCTIONS.get(getattr(op, "op", op))
    if reduce is None:
        return lambda values: None  # a reduction we do not compute (bitwise, premultiplied sum): unknown
    return lambda values: [reduce(torch.stack(values)).to(dtype)]


def all_gather(into_one: bool) -> Combine:
    """Into one tensor (`all_gather_into_tensor`) or into one output per rank (`all_gather`)."""
    if into_one:
        return lambda values: [torch.cat([v.reshape(-1) for v in values])]
    return lambda values: list(values)


def _combined(store: dist.Store, key: str, contributors: tuple[int, ...], combine: Combine) -> list | None:
    values = [_decode(store.get(f"{key}/{r}")) for r in contributors]
    if any(v is None for v in values):
        return None
    with torch._C._DisableTorchDispatch():
        return combine(values)


def _nth(results: Pending, i: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    resolved = results.resolve()
    if resolved is None:
        return None
    with torch._C._DisableTorchDispatch():
        return resolved[i].reshape(shape).to(dtype)


def _encode(values: torch.Tensor | None) -> bytes:
    if values is None:
        return b""
    with torch._C._DisableTorchDispatch():
        return pickle.dumps(values.contiguous())


def _decode(data: bytes) -> torch.Tensor | None:
    if not data:
        return None
    with torch._C._DisableTorchDispatch():
        return pickle.loads(data)
