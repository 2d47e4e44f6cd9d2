"""Ops a fake tensor cannot answer alone: host<->device copies and reads of GPU values.

Note: [Placeholder values]
A simulated GPU holds no data, so a value read back to the host is a placeholder: integers read
0, floating point 0.0, booleans False — except the result of `all()`, which reads True, so that
`torch.isfinite(x).all()` says "finite" and `GradScaler` keeps stepping. Tensors copied to the
host are zeros; one of `LARGE_HOST_FACTORY_NUMEL` elements or more stays a fake host tensor, as a large host
factory does (a module moved back with `.cpu()` costs no host memory). Every read still costs what it costs on a GPU: a small device-to-host copy and a
host wait for the stream. The summary counts placeholder reads by kind. Small host data that went
to the GPU and comes back unchanged reads its real values (Note [Shadow values]).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from phantora.models.ops import OpCall, TensorMeta
from phantora.runtime import routing
from phantora.runtime.dispatch import (LARGE_HOST_FACTORY_NUMEL, HybridMode, RecordingFakeMode, host_tensor_bytes,
                                       tensor_meta)
from phantora.runtime.shadows import shadows

aten = torch.ops.aten

ALL_TRUE_ATTR = "_phantora_all_true"
"""Set on the fake result of `all()`: its placeholder value is True (Note [Placeholder values])."""
PINNED_ATTR = "_phantora_pinned"
"""Set on a fake host tensor that `pin_memory()` made (its views are pinned too)."""


def _copy_call(name: str, dst: TensorMeta, src: TensorMeta) -> OpCall:
    return OpCall(name=name, args=(dst, src), kwargs=(), outputs=(dst,))


def _device_of(t: torch.Tensor) -> int:
    return t.device.index or 0


def _read_to_host(mode: HybridMode, src: torch.Tensor, *, blocking: bool) -> None:
    """Charge a device-to-host copy of `src` and, if blocking, wait for it."""
    device = _device_of(src)
    meta = tensor_meta(src)
    host_meta = TensorMeta(meta.shape, meta.dtype, meta.stride, "cpu")
    mode.recorder.before_kernel([src])
    stream = mode.recorder.launch(_copy_call("aten.copy_.default", host_meta, meta), device)
    if blocking and src.numel():  # an empty copy waits for nothing (models/ops.py Note [Ops without elements])
        mode.session.wait_for_stream(stream)


def placeholder_scalar(t: torch.Tensor) -> bool | int | float | complex:
    if t.dtype == torch.bool:
        return bool(getattr(t, ALL_TRUE_ATTR, False))
    if t.dtype.is_floating_point:
        return 0.0
    if t.dtype.is_complex:
        return 0j
    return 0


def local_scalar_dense(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    (t,) = args
    if not isinstance(t, FakeTensor):
        return func(*args, **kwargs)
    if t.device.type == "cuda":
        _read_to_host(mode, t, blocking=True)
    real = shadows.lookup(t)
    if real is not None:
        return real.item()
    mode.session.note_placeholder(".item()")
    return placeholder_scalar(t)


def is_nonzero(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    """`bool(t)` on a one-element GPU tensor: a read to the host, like `.item()`."""
    return bool(local_scalar_dense(mode, func, args, kwargs))


def install_tolist() -> None:
    """`tolist()` of a GPU tensor: one device-to-host copy, then Python lists (a GPU build's tensor_list.cpp).
    FakeTensor's own `tolist` reads element by element, an `.item()` each: a copy kernel, a wait and the
    host cost of a read per element (16 of each for a MoE layer's counts). A fake CUDA tensor of one or more
    dimensions goes through one copy instead; its values are the copy's (known, or placeholder zeros as an
    element read gives). Booleans keep the element reads (their placeholder can be all-true), and so does a
    tensor under another library's fake mode (Note [Foreign fake modes])."""
    element_by_element = FakeTensor.tolist

    def tolist(self: FakeTensor) -> Any:
        active = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
        if (self.dim() == 0 or self.device.type != "cuda" or self.dtype == torch.bool
                or (active is not None and not isinstance(active, RecordingFakeMode))):
            return element_by_element(self)
        return self.to("cpu").tolist()

    FakeTensor.tolist = tolist


def to_copy(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    src = args[0]
    target = kwargs.get("device")
    target_type = torch.device(target).type if target is not None else src.device.type
    if isinstance(src, FakeTensor) and src.device.type == "cuda" and target_type == "cpu":
        blocking = not kwargs.get("non_blocking", False)
        _read_to_host(mode, src, blocking=blocking)
        dtype = kwargs.get("dtype") or src.dtype
        real = shadows.lookup(src, synced=blocking)
        if real is not None:
            return real.to(dtype=dtype, copy=True)
        mode.session.note_placeholder("device-to-host copy")
        if src.numel() >= LARGE_HOST_FACTORY_NUMEL:  # stays fake, as a large host factory does (Lightning's
            with mode.recorder.suppress():           # model.cpu() at the end of fit: 20 GB of zeros)
                return mode.run_fake(func, args, kwargs)
        return torch.zeros(src.shape, dtype=dtype)
    if not isinstance(src, FakeTensor) and target_type == "cuda":
        return _host_to_device(mode, src, kwargs)
    return mode.run_fake(func, args, kwargs)


def _host_to_device(mode: HybridMode, src: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """A real CPU tensor moves to the GPU: a new fake tensor plus a host-to-device copy kernel.

    The real tensor is not handed to FakeTensorMode (whose memo would keep a weak reference to
    it and make `swap_tensors` refuse to swap module parameters)."""
    dtype = kwargs.get("dtype") or src.dtype
    device = torch.device(kwargs["device"])
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    strides = _preserved_strides(src, dtype)
    with mode.fake_mode:
        out = torch.empty_strided(src.shape, strides, dtype=dtype, device=device)
    _charge_host_to_device(mode, out, src, blocking=not kwargs.get("non_blocking", False))
    return out


def _preserved_strides(t: torch.Tensor, dtype: torch.dtype) -> tuple[int, ...]:
    """The strides `_to_copy` gives its result (memory_format=preserve_format)."""
    return torch.empty_like(t, device="meta", dtype=dtype).stride()


def _charge_host_to_device(mode: HybridMode, dst: torch.Tensor, src: torch.Tensor, *, blocking: bool) -> None:
    mode.recorder.before_kernel([dst])
    shadows.remember(dst, src)
    src_meta = tensor_meta(src)
    if src.device.type == "cuda":
        src_meta = TensorMeta(src_meta.shape, src_meta.dtype, src_meta.stride, "cpu")
    stream = mode.recorder.launch(_copy_call("aten.copy_.default", tensor_meta(dst), src_meta), _device_of(dst))
    # From pageable memory the copy is synchronous for the host (CUDA stages it); from pinned
    # memory with non_blocking=True the host goes on at once; an empty copy stages nothing (models/ops.py
    # Note [Ops without elements]).
    if (blocking or not src.is_pinned()) and dst.numel():
        mode.session.wait_for_stream(stream)


def copy_(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    non_blocking = bool(args[2]) if len(args) > 2 else bool(kwargs.get("non_blocking", False))
    dst_fake, src_fake = isinstance(dst, FakeTensor), isinstance(src, FakeTensor)
    if dst_fake and not src_fake and dst.device.type == "cuda":
        _charge_host_to_device(mode, dst, src, blocking=not non_blocking)
        return dst
    if src_fake and not dst_fake and src.device.type == "cuda":
        _read_to_host(mode, src, blocking=not non_blocking)
        real = shadows.lookup(src, synced=not non_blocking)
        with torch.no_grad():
            if real is not None:
                dst.copy_(real)
            else:
                mode.session.note_placeholder("device-to-host copy")
                dst.zero_()
        return dst
    return mode.run_fake(func, args, kwargs)


def pin_memory(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    """`pin_memory()` of a large host tensor kept fake (Note [Hybrid dispatch]): a copy into page-locked host
    memory, host work only (its bytes, from the caching host allocator's reused blocks: no fresh pages); the copy
    is pinned, so a later `non_blocking` copy to the GPU does not block."""
    with mode.recorder.suppress():
        out = mode.run_fake(aten.clone.default, (args[0],), {})
    setattr(out, PINNED_ATTR, True)
    mode.session.host_tensor_op(host_tensor_bytes([args[0]], out)[0], [])
    return out


def is_pinned(mode: HybridMode, func, args: tuple, kwargs: dict) -> bool:
    t = args[0]
    return bool(getattr(t, PINNED_ATTR, False) or getattr(t._base, PINNED_ATTR, False))


def mark_all_true(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    out = mode.run_fake(func, args, kwargs)
    setattr(out, ALL_TRUE_ATTR, True)
    return out


def record_stream(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    tensor, stream = args[0], args[1]
    mode.recorder.memory.record_stream(tensor, stream.stream_id)
    return None


def equal(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    mode.run_fake(aten.eq.Tensor, args, {})
    _read_to_host(mode, args[0], blocking=True)
    mode.session.note_placeholder("torch.equal")
    return True


def nonzero(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    """Of known values, the real result (Note [Shadow values]); else a placeholder: every element counts as
    non-zero (the largest result, so memory is not underestimated)."""
    (t,) = args[:1]
    if shadows.lookup(t, synced=False) is not None:
        return mode.run_fake(func, args, kwargs)  # a data-dependent shape of known values: HybridMode runs it
    _read_to_host(mode, t, blocking=True)  # the real kernel syncs to learn the output size
    mode.session.note_placeholder("nonzero")
    with mode.fake_mode:
        out = torch.empty((t.numel(), t.dim()), dtype=torch.int64, device=t.device)
    mode.recorder.launch(OpCall(str(func), (tensor_meta(t),), (), (tensor_meta(out),)), _device_of(t))
    return out


def topk(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    """`topk` of values that are not known: its indices are drawn (Note [Simulated routing] in runtime/routing.py)."""
    values, indices = mode.run_fake(func, args, kwargs)
    source = args[0]
    if (isinstance(indices, FakeTensor) and indices.device.type == "cuda" and shadows.lookup(indices) is None
            and source.numel() <= routing.MAX_DRAW_ELEMENTS and source.numel() > 0):
        dim = int(args[2] if len(args) > 2 else kwargs.get("dim", -1))
        draw = routing.next_draw(_device_of(indices))
        everyone = functools.lru_cache(maxsize=16)(functools.partial(
            routing.drawn_topk_indices, tuple(indices.shape), dim, source.shape[dim] if source.dim() else 1, draw))
        shadows.set(indices, everyone(mode.session.config.rank), everyone=everyone)
        mode.session.note_placeholder("topk (drawn routing)")
    return values, indices


def bincount(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    """Counts of known values are real; of unknown ones, drawn (Note [Simulated routing] in runtime/routing.py).
    CUDA's bincount first reads the input's largest and smallest values on the host (two reductions and two
    device-to-host reads), which the handler issues too."""
    t = args[0]
    weights = args[1] if len(args) > 1 else kwargs.get("weights")
    minlength = int(args[2] if len(args) > 2 else kwargs.get("minlength", 0))
    if not isinstance(t, FakeTensor):
        return func(*args, **kwargs)
    real = shadows.lookup(t)
    if weights is not None or (real is None and minlength <= 0):
        raise NotImplementedError("phantora: aten.bincount has a data-dependent output shape; supported on GPU "
                                  "tensors with minlength (the number of bins) and without weights "
                                  "(docs/runtime.md, Values)")
    for extreme in (aten.max.default, aten.min.default):
        _read_to_host(mode, mode.run_fake(extreme, (t,), {}), blocking=True)
    if real is not None:
        values = torch.bincount(real, minlength=minlength)
        others = shadows.everyone(t)
        everyone = None if others is None else functools.partial(_bincount_of, others, minlength)
    else:
        everyone = functools.partial(routing.random_counts, t.numel(), minlength, routing.next_draw(_device_of(t)))
        values = everyone(mode.session.config.rank)
        mode.session.note_placeholder("bincount")
    with mode.fake_mode:
        out = torch.empty(values.shape, dtype=torch.int64, device=t.device)
    device = _device_of(t)
    mode.recorder.memory.track_new_storage(out, mode.recorder.current_stream_id(device))
    mode.recorder.launch(OpCall(str(func), (tensor_meta(t),), (), (tensor_meta(out),)), device)
    shadows.set(out, values, everyone=everyone)
    return out


def _bincount_of(everyone, minlength: int, rank: int) -> torch.Tensor:
    return torch.bincount(everyone(rank), minlength=minlength)


def grouped_mm(mode: HybridMode, func, args: tuple, kwargs: dict) -> Any:
    """Note: [Grouped GEMMs off the fast path]
    `torch._grouped_mm` as a CUDA build runs it (GroupedBlas.cpp `_grouped_mm_cuda`): bf16 operands and output on
    compute capability 9.0 or 10.0 are one CUTLASS kernel; anything else (float32 experts under autocast, as
    Hugging Face's MoE layers give it, or an A100) takes `_grouped_mm_fallback`: the offsets are copied to the host
    and read (a wait), then one `mm` per group into slices of the output, or one `bmm` when both operands are 3-D.
    PyTorch's meta kernel accepts bf16 alone, so the fallback is issued here op by op, each costed as it runs. The
    group sizes are the offsets' values: known where the routing is (Note [Simulated routing]), else placeholders."""
    mat_a, mat_b = args[0], args[1]
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    out_dtype = args[4] if len(args) > 4 else kwargs.get("out_dtype")
    bf16 = torch.bfloat16
    fast = (mat_a.dtype == mat_b.dtype == bf16 and out_dtype in (None, bf16)
            and mode.session.gpu.compute_capability in ((9, 0), (10, 0)))
    if fast:
        return mode.run_fake(func, args, kwargs)
    from torch._meta_registrations import _create_grouped_mm_output_tensor
    with mode.fake_mode:
        out = _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)
    if offs is None:
        mode.run_fake(aten.bmm.out, (mat_a, mat_b), {"out": out})
        return out
    ends = to_copy(mode, aten._to_copy.default, (offs,), {"device": torch.device("cpu")}).tolist()
    start = 0
    for group, end in enumerate(ends):
        if mat_a.dim() == 2 and mat_b.dim() == 3:
            pieces = (_fake_view(mode, aten.slice.Tensor, mat_a, 0, start, end),
                      _fake_view(mode, aten.select.int, mat_b, 0, group), _fake_view(mode, aten.slice.Tensor, out, 0, start, end))
        elif mat_b.dim() == 2 and mat_a.dim() == 3:
            pieces = (_fake_view(mode, aten.select.int, mat_a, 0, group),
                      _fake_view(mode, aten.slice.Tensor, mat_b, 1, start, end), _fake_view(mode, aten.slice.Tensor, out, 1, start, end))
        else:
            pieces = (_fake_view(mode, aten.slice.Tensor, mat_a, 1, start, end),
                      _fake_view(mode, aten.slice.Tensor, mat_b, 0, start, end), _fake_view(mode, aten.select.int, out, 0, group))
        mode.run_fake(aten.mm.out, pieces[:2], {"out": pieces[2]})
        start = end
    return out


def _fake_view(mode: HybridMode, view, *args) -> torch.Tensor:
    return mode.run_fake(view, args, {})


HANDLERS = {
    aten._local_scalar_dense.default: local_scalar_dense,
    aten.is_nonzero.default: is_nonzero,
    aten._to_copy.default: to_copy,
    aten.copy_.default: copy_,
    aten.all.default: mark_all_true,
    aten.all.dim: mark_all_true,
    aten.record_stream.default: record_stream,
    aten.equal.default: equal,
    aten.nonzero.default: nonzero,
    aten.bincount.default: bincount,
    aten._grouped_mm.default: grouped_mm,
    aten._pin_memory.default: pin_memory,
    aten.is_pinned.default: is_pinned,
    aten.topk.default: topk,
}
