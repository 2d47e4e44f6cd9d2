"""A cheaper way to FakeTensorMode's own dispatch cache, for ops already seen with the same inputs.

Note: [Replaying FakeTensorMode's cache]
FakeTensorMode's dispatch of an op costs more than all Phantora does with it: it builds a cache key of every
input tensor's full metadata (`extract_tensor_metadata`: memory format, sparsity, ...), looks up an entry
and rebuilds the outputs from it, all behind a re-dispatch into the mode (mode push and pop, the C++
dispatcher, FakeTensor's own `__torch_dispatch__`); and in a training loop nearly every op hits its cache.

`DispatchCache` keys an op by what FakeTensorMode's key holds, read more cheaply: the op; the default dtype
and device and inference mode; for each fake tensor its dtype, shape, strides, device, storage offset,
storage size, `requires_grad`, conjugate, negative and inference bits (layout strided; the memory format
and the quantized and sparse bits FakeTensorMode also keys by follow from these); for each other argument
its type and value, lists by type and length. Any argument it cannot key the same way (a real tensor, a
fake tensor of another mode or with a constant, a symbolic size, a generator, a function), symbolic shapes
or a proxy mode tracing (FakeTensorMode keys by those too) make the op take FakeTensorMode's path. Equal
keys here mean equal keys there, so on a hit FakeTensorMode would hit its cache too, with the entry that
the first call of this key left: `DispatchCache` keeps that very entry and builds the outputs from it
exactly as `FakeTensorMode._output_from_cache_entry` does: an in-place op returns its input, a view shares
its input's storage (`set_`), anything else gets a fresh meta storage. Aliasing, storage identity and
version counters are therefore what FakeTensorMode gives: the version counter and autograd's view
tracking are the autograd layer's, above the interception, on either path.

An entry is learnt only from a call that went through FakeTensorMode and succeeded (so the CUDA checks,
Note [Checks of the CUDA kernels], passed for these dtypes) and for which FakeTensorMode stored a valid
cache entry; ops it declines to cache (data-dependent output shapes, in-place views, `out=` arguments,
custom ops, ...) take its path, but for those of Note [Ops FakeTensorMode does not cache]. The entry also
holds what the recorder derives from the op's metadata alone (its `OpCall` and what the cost models say of
it, `Session.cost`), so a hit neither rebuilds nor re-hashes them.

`PHANTORA_DISPATCH_CACHE=0` turns the cache off; tests/integration/test_dispatch_cache_records.py runs programs both
ways and compares every record.

Note: [Ops FakeTensorMode does not cache]
Two kinds of ops it declines are frequent in training and have outputs the first call shows in full:
- ops that return a list ("non-FakeTensor output"): the foreach ops of optimizers and `clip_grad_norm_`
  (`_foreach_sqrt`, `_foreach_norm`, ...), each over every parameter. Where that is the only reason, the op
  neither writes its inputs nor returns views, and each tensor it returned has a storage of its own, the
  entry records each result's metadata as FakeTensorMode's entries do for new tensors, and a hit builds
  the list the same way;
- `_unsafe_view` (`reshape` of a tensor that must be copied first: 2-4 % of a Llama's ops), declined because
  its schema does not say that its result shares its input's storage. Where the result does, the entry
  says so as it would for a view, and a hit builds it on the input's storage.

Note: [Optimizer steps]
An optimizer's foreach step passes its step size and bias corrections as floats, new in every step
(`_foreach_addcdiv_(params, exp_avgs, denoms, -lr / bias_correction1)`), so FakeTensorMode's cache, which
keys by every value, misses every update of every step, each over every parameter. An in-place foreach op
returns nothing whatever its floats: its meta kernel checks the lists, shapes and dtypes (a float's type
matters for type promotion), not the values. Its key therefore holds its floats' type alone (other scalars
keep their values: an integer exponent's sign decides whether `pow` of integers fails). Its costs still
follow its values: the recorder works them out on each call instead of keeping them in the entry.

Note: [Building fake tensors]
`FakeTensor(mode, meta tensor, device)` costs more than the rest of a hit: it normalises the device twice,
checks its arguments, and sets a dozen attributes one by one (four memo descriptors among them), the same
for every tensor of a mode and device. The cache builds the first tensor of each device with it, then the
others as it does (`Tensor._make_subclass` with the device's dispatch keys, `data_ptr` guarded) with the
first one's attributes copied (`_fake`); a test compares the two tensors' attributes and dispatch keys.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    FakeTensor,
    FakeTensorConfig,
    FakeTensorMode,
    _BypassDispatchCache,
    _CacheKeyState,
    _DispatchCacheBypassEntry,
    _DispatchCacheEntryOutputInfo,
    _DispatchCacheValidEntry,
    extract_tensor_metadata,
)

_SCALARS = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout,
                      torch.memory_format})
"""Argument types keyed by type and value, as FakeTensorMode keys them."""

MAX_ENTRIES = 1 << 16
"""Keys kept before the cache starts over (a program whose shapes never repeat must not grow it forever)."""

_strided = torch.strided
_META = torch.device("meta")
_no_subclass_torch_function = torch._C.DisableTorchFunctionSubclass
_get_dispatch_mode = torch._C._get_dispatch_mode
_PROXY = torch._C._TorchDispatchModeKey.PROXY
_get_default_dtype = torch.get_default_dtype
_get_default_device = torch._C._get_default_device
_inference_mode = torch.is_inference_mode_enabled


_NOT_A_TENSOR = "non-FakeTensor output"
"""Why FakeTensorMode does not cache an op that returns a list (`_validate_output_for_cache_entry`)..."""
_UNSAFE_VIEW = "unsafe view"
"""... and `_unsafe_view` (`_validate_cache_key`)."""


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return _tensors_in(list(value.values()))
    return []


@functools.cache
def _blind_to_floats(func: Any) -> bool:
    """A foreach op that writes its inputs and returns nothing (Note [Optimizer steps])."""
    return func.__name__.startswith("_foreach_") and not func._schema.returns


class _KeyedOp:
    """An op as a key holds it: one object per op, hashed by identity. An `OpOverload` hashes in Python
    (`hash(self._op)`), and a key is hashed on every call."""

    __slots__ = ("func", "blind")

    def __init__(self, func: Any) -> None:
        self.func = func
        """Held, so that no other op takes its `id` while this entry lives."""
        self.blind = _blind_to_floats(func)


_keyed_ops: dict[int, _KeyedOp] = {}


def _keyed_op(func: Any) -> _KeyedOp:
    keyed = _keyed_ops.get(id(func))
    if keyed is None or keyed.func is not func:
        keyed = _keyed_ops[id(func)] = _KeyedOp(func)
    return keyed


def enabled_by_environment() -> bool:
    return os.environ.get("PHANTORA_DISPATCH_CACHE", "1") != "0"


class CachedOp:
    """What one key's first call left: FakeTensorMode's cache entry (or one made the same way for a list of new
    tensors), and the op's costs once worked out (`Session.cost`: the recorder keeps them here)."""

    __slots__ = ("entry", "returns_list", "keyed_by_values", "costed", "traits")

    def __init__(self, entry: _DispatchCacheValidEntry, returns_list: bool = False) -> None:
        self.entry = entry
        self.returns_list = returns_list
        self.keyed_by_values = True
        """Whether the key holds every argument's value, so the op's costs may be kept here (Note [Optimizer
        steps]: not for ops keyed by their floats' types)."""
        self.costed = None
        self.traits = None
        """What the recorder asks of the op itself (dispatch.OpTraits), once it recorded it."""


class DispatchCache:
    """Note [Replaying FakeTensorMode's cache]."""

    def __init__(self, mode: FakeTensorMode) -> None:
        self._mode = mode
        self._ops: dict[tuple, CachedOp | None] = {}
        """Key -> the cached op, or None: FakeTensorMode does not cache it."""
        self._states: dict[torch.device, dict] = {}
        """Device -> the attributes of a new fake tensor on it (`_fake`)."""
        self._mark_data_ptr = (torch._C._set_warn_deprecated_on_mutable_data_ptr if mode._allow_unsafe_data_ptr_access
                               else torch._C._set_throw_on_mutable_data_ptr)
        """What FakeTensor's constructor does to a new tensor's `data_ptr`."""

    def __len__(self) -> int:
        """Keys whose outputs are served from the cache."""
        return sum(cached is not None for cached in self._ops.values())

    # -- keys ------------------------------------------------------------------------------
    def key(self, func: Any, args: tuple, kwargs: dict) -> tuple | None:
        """This call's key, or None if some argument cannot be keyed as FakeTensorMode keys it, or FakeTensorMode
        keys by more than the arguments (symbolic shapes, or a proxy mode tracing)."""
        if self._mode.shape_env is not None or _get_dispatch_mode(_PROXY) is not None:
            return None
        op = _keyed_op(func)
        parts: list = [op, _get_default_dtype(), _get_default_device(), _inference_mode()]
        blind = op.blind
        with _no_subclass_torch_function():  # FakeTensor has none; without the check, its attributes read faster
            if not self._add(parts, args, blind):
                return None
            if kwargs:
                for name, value in kwargs.items():
                    parts.append(name)
                    if not self._add(parts, (value,), blind):
                        return None
        return tuple(parts)

    def _add(self, parts: list, values: tuple | list, blind: bool) -> bool:
        """Key `values`; `blind`: floats by their type alone (Note [Optimizer steps])."""
        mode = self._mode
        for v in values:
            kind = type(v)
            if kind is FakeTensor:
                if v.fake_mode is not mode or v.constant is not None or v.layout is not _strided:
                    return False
                parts.append((v.dtype, v.shape, v.stride(), v._fake_device, v.storage_offset(),
                              v.untyped_storage().nbytes(), v.requires_grad, v.is_conj(), v.is_neg(),
                              v.is_inference()))
            elif kind in _SCALARS:
                parts.append(kind)
                if not (blind and kind is float):
                    parts.append(v)
            elif kind is list or kind is tuple or kind is torch.Size:
                parts.append(kind)
                parts.append(len(v))
                if not self._add(parts, v, blind):
                    return False
            else:  # a subclass of FakeTensor, a real tensor, a symbolic size, a generator, ...
                return False
        return True

    # -- lookups -----------------------------------------------------------------------------
    def lookup(self, key: tuple) -> CachedOp | None:
        return self._ops.get(key)

    def knows(self, key: tuple) -> bool:
        """Whether `key` was seen: either cached, or known to take FakeTensorMode's path."""
        return key in self._ops

    def fake_mode_key(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """FakeTensorMode's own key of this call (before it runs: an op may change its inputs), None if it
        would not cache the call."""
        try:
            return self._mode._cache_key(_CacheKeyState(self._mode.shape_env), func, args, kwargs)
        except _BypassDispatchCache:
            return None

    def learn(self, key: tuple, fake_mode_key: Any, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """The call keyed `key` succeeded through FakeTensorMode and returned `out`: keep the entry it cached,
        if it did, or one for a list of new tensors (Note [Ops FakeTensorMode does not cache])."""
        if len(self._ops) >= MAX_ENTRIES:
            self._ops.clear()
        entry = FakeTensorMode.cache.get(fake_mode_key) if fake_mode_key is not None else None
        cached = None
        if isinstance(entry, _DispatchCacheValidEntry):
            cached = CachedOp(entry)
        elif isinstance(entry, _DispatchCacheBypassEntry):
            cached = self._from_output(entry.reason, func, args, kwargs, out)
        if cached is not None:
            cached.keyed_by_values = not _blind_to_floats(func)
        self._ops[key] = cached

    def _from_output(self, reason: str, func: Any, args: tuple, kwargs: dict, out: Any) -> CachedOp | None:
        """An entry made as FakeTensorMode makes its own, for an op it declined for `reason` alone where the
        outputs show what a hit must build (Note [Ops FakeTensorMode does not cache])."""
        if reason == _NOT_A_TENSOR and self._new_tensors(func, args, kwargs, out):
            infos = tuple(_DispatchCacheEntryOutputInfo(inplace_idx=None, metadata=extract_tensor_metadata(o),
                                                        view_idx=None) for o in out)
            return CachedOp(_DispatchCacheValidEntry(output_infos=infos, is_output_tuple=True), returns_list=True)
        if reason == _UNSAFE_VIEW and self._view_of_first(args, out):
            info = _DispatchCacheEntryOutputInfo(inplace_idx=None, metadata=extract_tensor_metadata(out), view_idx=0)
            return CachedOp(_DispatchCacheValidEntry(output_infos=(info,), is_output_tuple=False))
        return None

    def _ours(self, t: Any) -> bool:
        return type(t) is FakeTensor and t.fake_mode is self._mode and t.constant is None and t.layout is _strided

    def _view_of_first(self, args: tuple, out: Any) -> bool:
        """Whether `out` is a new tensor on the storage of the op's first argument (`_unsafe_view`'s result)."""
        return (self._ours(out) and self._ours(args[0]) and out is not args[0]
                and out.untyped_storage()._cdata == args[0].untyped_storage()._cdata)

    def _new_tensors(self, func: Any, args: tuple, kwargs: dict, out: Any) -> bool:
        """Whether `out` is a list of fake tensors of this mode, each with a storage of its own, made by an op
        that neither writes its inputs nor returns views of them."""
        if type(out) is not list or func.is_view or func._schema.is_mutable:
            return False
        if not all(self._ours(o) for o in out):
            return False
        inputs = [a for a in _tensors_in((args, kwargs))]
        storages = {o.untyped_storage()._cdata for o in out}
        return len(storages) == len(out) and not storages & {t.untyped_storage()._cdata for t in inputs}

    # -- outputs -----------------------------------------------------------------------------
    def outputs(self, cached: CachedOp, func: Any, args: tuple) -> Any:
        """The op's outputs, built from its entry as `FakeTensorMode._output_from_cache_entry` builds them."""
        entry = cached.entry
        if cached.returns_list:
            return [self._output(info, func, args) for info in entry.output_infos]
        if entry.is_output_tuple:
            return tuple(self._output(info, func, args) for info in entry.output_infos)
        return self._output(entry.output_infos[0], func, args)

    def _output(self, info: Any, func: Any, args: tuple) -> Any:
        if info.inplace_idx is not None:
            return args[info.inplace_idx]
        meta = info.metadata
        if meta is None:
            return info.constant_value if info.view_idx is None else None
        with torch._C._DisableTorchDispatch():
            empty = torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, layout=meta.layout,
                                        device=_META, requires_grad=meta.requires_grad)
            if meta.is_conj:
                torch._C._set_conj(empty, True)
            if meta.is_neg:
                torch._C._set_neg(empty, True)
            if info.view_idx is not None:  # a view shares its input's storage
                storage = args[info.view_idx].untyped_storage()
                empty.set_(storage, meta.storage_offset, meta.shape, meta.stride)
        return self._fake(empty, meta.device)

    def _fake(self, elem: torch.Tensor, device: torch.device) -> FakeTensor:
        """`FakeTensor(mode, elem, device)`, from the second tensor of a device on without its constructor's
        checks and normalisations, which give every tensor of a (mode, device) the same attributes: they are
        copied from the first (Note [Building fake tensors])."""
        state = self._states.get(device)
        if state is None:
            made = FakeTensor(self._mode, elem, device)
            if not FakeTensorConfig.debug:  # else each tensor keeps its own traceback
                self._states[device] = dict(vars(made))
            return made
        made = torch.Tensor._make_subclass(FakeTensor, elem, elem.requires_grad, dispatch_device=True,
                                           device_for_backend_keys=state["_fake_device"])
        self._mark_data_ptr(made)
        made.__dict__.update(state)
        return made
