"""Functional collectives (`torch.ops._c10d_functional.*`, used by DTensor, tensor parallelism and
FSDP2's helpers) reach the dispatcher with fake tensors, where FakeTensorMode would answer them
with shape-only meta kernels. These handlers issue them on the group's simulated NCCL stream
instead, as c10d's C++ implementation would: the result tensor is allocated on the current
stream, the call is launched, and `wait_tensor` on the result makes the current stream wait for
the call's end.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed._functional_collectives as fc
import torch.distributed.distributed_c10d as c10d

from phantora.runtime.distributed import SimulatedNcclGroup, _nbytes, check_split_sizes, unwaited
from phantora.runtime.shadows import shadows


def _group(group_name: str) -> SimulatedNcclGroup:
    pg = c10d._resolve_process_group(group_name)
    if not isinstance(pg, SimulatedNcclGroup):
        raise NotImplementedError(f"phantora: functional collective on a non-NCCL process group {pg!r}")
    return pg


def _flat(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _result(mode, func, args: tuple, kwargs: dict) -> Any:
    """The op's output from its meta kernel: memory is allocated, no kernel is recorded."""
    recorder = mode.recorder
    with recorder.suppress():
        out = mode.run_fake(func, args, kwargs)
    device = _flat(out)[0].device.index or 0
    stream_id = recorder.current_stream_id(device)
    for t in _flat(out):
        recorder.memory.track_new_storage(t, stream_id)
    return out


def _issue(pg: SimulatedNcclGroup, op: str, parts: list[tuple[int, list[torch.Tensor]]], out: Any,
           root: int | None = None) -> Any:
    """Launch one call per part (several parts: one coalesced NCCL group) producing `out`."""
    outputs = _flat(out)
    if len(parts) == 1:
        size, tensors = parts[0]
        work = pg._launch(op, size, tensors, outputs, root=root)
    else:
        device = outputs[0].device
        pg._start_coalescing(device)
        for size, tensors in parts:
            pg._launch(op, size, tensors, outputs, root=root)
        work = pg._end_coalescing(device)
    unwaited.add(work, outputs)
    return out


def all_reduce(mode, func, args, kwargs):
    inp, _reduce_op, group_name = args[:3]
    out = _result(mode, func, args, kwargs)
    return _issue(_group(group_name), "all_reduce", [(_nbytes(inp), [inp])], out)


def all_reduce_coalesced(mode, func, args, kwargs):
    inputs, _reduce_op, group_name = args[:3]
    out = _result(mode, func, args, kwargs)
    return _issue(_group(group_name), "all_reduce", [(_nbytes(t), [t]) for t in inputs], out)


def all_gather_into_tensor(mode, func, args, kwargs):
    inp, group_size, group_name = args[:3]
    out = _result(mode, func, args, kwargs)
    pg = _group(group_name)
    _issue(pg, "all_gather", [(_nbytes(inp) * group_size, [inp])], out)
    if shadows:
        shadows.all_gather(inp, out, list(pg.global_ranks))
    return out


def all_gather_into_tensor_coalesced(mode, func, args, kwargs):
    inputs, group_size, group_name = args[:3]
    out = _result(mode, func, args, kwargs)
    return _issue(_group(group_name), "all_gather", [(_nbytes(t) * group_size, [t]) for t in inputs], out)


def reduce_scatter_tensor(mode, func, args, kwargs):
    inp, _reduce_op, _group_size, group_name = args[:4]
    out = _result(mode, func, args, kwargs)
    return _issue(_group(group_name), "reduce_scatter", [(_nbytes(inp), [inp])], out)


def reduce_scatter_tensor_coalesced(mode, func, args, kwargs):
    inputs, _reduce_op, _group_size, group_name = args[:4]
    out = _result(mode, func, args, kwargs)
    return _issue(_group(group_name), "reduce_scatter", [(_nbytes(t), [t]) for t in inputs], out)


def all_to_all_single(mode, func, args, kwargs):
    inp, output_splits, input_splits, group_name = args[:4]
    pg = _group(group_name)
    check_split_sizes(input_splits, inp, pg.size())
    out = _result(mode, func, args, kwargs)
    check_split_sizes(output_splits, out, pg.size())
    _issue(pg, "all_to_all", [(_nbytes(inp), [inp])], out)
    if shadows:
        shadows.all_to_all(inp, out, pg.rank(), list(pg.global_ranks), (output_splits, input_splits))
    return out


def broadcast(mode, func, args, kwargs):
    inp, src, group_name = args[:3]
    out = _result(mode, func, args, kwargs)
    pg = _group(group_name)
    return _issue(pg, "broadcast", [(_nbytes(inp), [inp])], out, root=pg.global_ranks[src])


def wait_tensor(mode, func, args, kwargs):
    (t,) = args[:1]
    work = unwaited.pop(t)
    if work is not None:
        work.wait()
    return t


def wrap_tensor_autograd(mode, func, args, kwargs):
    """`_c10d_functional._wrap_tensor_autograd` (torch >= 2.12) wraps its input in an
    AsyncCollectiveTensor, as on a GPU: no kernel and no memory; the subclass waits for the collective
    at the first op that reads it (and costs host time at each op, Note [Ops from tensor subclasses]).
    What it wraps is an alias of the input: the fake kernel's copy would be a storage the memory
    tracker never saw, which the next view of it would allocate (and whose known values, Note [Shadow
    values], would be lost)."""
    mode.session.host_only_op(str(func), allocates=False)
    with mode.recorder.suppress():
        alias = mode.run_fake(torch.ops.aten.alias.default, (args[0],), {})
    return fc.AsyncCollectiveTensor(alias)


# Note [A GPU program's functional collectives]
# `torch.distributed._functional_collectives` returns a collective's result wrapped in an
# AsyncCollectiveTensor, whose Python dispatch waits at the first op that reads it, unless it thinks
# it is being traced: then it waits at once and returns a plain tensor. One of its signs of tracing
# is an active FakeTensorMode, which under Phantora is always ours. A program on a GPU takes the
# eager path, so `_are_we_tracing` is told to disregard our mode, and the others stay as torch has
# them: the same Python runs (each op on the wrapper pays the subclass's dispatch, models/host.py
# `subclass_op_ns`), and the wait falls where it falls on a GPU.
def install(fake_mode) -> None:
    """Note [A GPU program's functional collectives]."""
    original = fc._are_we_tracing
    fake_key = torch._C._TorchDispatchModeKey.FAKE

    def are_we_tracing() -> bool:
        if torch._C._get_dispatch_mode(fake_key) is not fake_mode:
            return original()
        if fc.is_torchdynamo_compiling() or fc.get_proxy_mode() is not None:
            return True
        return torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.PythonDispatcher)

    fc._are_we_tracing = are_we_tracing


def handlers() -> dict[Any, Any]:
    """Dispatch handlers for the functional collectives (and their autograd-aware variants)."""
    f = torch.ops._c10d_functional
    table = {
        f.all_reduce.default: all_reduce,
        f.all_reduce_.default: all_reduce,
        f.all_reduce_coalesced.default: all_reduce_coalesced,
        f.all_reduce_coalesced_.default: all_reduce_coalesced,
        f.all_gather_into_tensor.default: all_gather_into_tensor,
        f.all_gather_into_tensor_out.default: all_gather_into_tensor,
        f.all_gather_into_tensor_coalesced.default: all_gather_into_tensor_coalesced,
        f.reduce_scatter_tensor.default: reduce_scatter_tensor,
        f.reduce_scatter_tensor_coalesced.default: reduce_scatter_tensor_coalesced,
        f.all_to_all_single.default: all_to_all_single,
        f.broadcast.default: broadcast,
        f.broadcast_.default: broadcast,
        f.wait_tensor.default: wait_tensor,
    }
    if hasattr(f, "_wrap_tensor_autograd"):
        table[f._wrap_tensor_autograd.default] = wrap_tensor_autograd
    autograd = torch.ops._c10d_functional_autograd
    table.update({
        autograd.all_to_all_single.default: all_to_all_single,
        autograd.reduce_scatter_tensor.default: reduce_scatter_tensor,
        autograd.all_gather_into_tensor.default: all_gather_into_tensor,
    })
    return table
