"""Real values of small host data copied to the GPU, kept until the GPU overwrites them.

Note: [Shadow values]
Programs sometimes send small host data through the GPU and read it back: DDP's reducer moves
its bucket order to the GPU, broadcasts it and copies it back; DTensor's RNG code calls `.tolist()`
on an index tensor it built on the host. A placeholder there (Note [Placeholder values]) would
corrupt the program's own bookkeeping. So a host-to-device copy of at most `MAX_SHADOW_BYTES`
keeps a real copy (a *shadow*) of what it wrote, keyed by the fake storage; reading that exact view
back returns the shadow instead of a placeholder. An op whose tensor inputs all have shadows runs
for real on them too, and its results get shadows (`my_state == rng_state` in DTensor's RNG
setup). Any other kernel that writes the storage drops the shadow, as does any collective except
a broadcast (every rank's program puts the same values there, which is what a broadcast makes
true on a real cluster).

A few factories make values that depend on nothing but their arguments (`arange`, `full`, `zeros`, `ones`,
`scalar_tensor`, and `zeros_like`, `ones_like`, `full_like`, `new_zeros`, ... of a tensor whose values need not
be known): they run for real on the host and shadow their results, the same on every rank. So index
arithmetic built from them (a round-robin expert assignment, its argsort, its bincount) stays real. Results of
ops on shadows may be up to `MAX_COMPUTED_SHADOW_BYTES`.

Some shadows are known on *every* rank by construction: a drawn routing choice every rank can compute
for any rank (Note [Simulated routing] in runtime/routing.py), and what ops compute from such shadows
alone. Their entry then holds a function from a global rank to that rank's values (`Everyone`). A
collective of such a shadow is known without the other ranks' data, and its result is known on every
member in the same way: in an all-to-all with even splits rank r receives block r of every rank s's
input, computed as s would (`Shadows.all_to_all`); an all-gather is every member's values in group order
(`Shadows.all_gather`).

A few ops a CUDA build runs on dtypes its CPU build does not take run on a stand-in with the same result
(`CPU_STAND_INS`: `histc` of integers, a router's count of expert indices).

Values other ranks supply (the result of a collective on known values: Note [Values through
collectives] in runtime/collective_values.py) are `Pending`: they can be read only once every rank has
issued the collective, which this rank knows only after its host has waited for the result. A read of
the GPU (`.item()`, a blocking copy to the host) waits first, then resolves them (`lookup`); an op on a
pending shadow gets a pending result, computed when it is read; a non-blocking copy does not resolve
them (its host tensor holds placeholders).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from phantora.models.ops import contiguous_strides

MAX_SHADOW_BYTES = 1 << 16
"""Largest host-to-device copy that keeps a shadow."""
MAX_COMPUTED_SHADOW_BYTES = 1 << 20
"""Largest result of a factory or an op on shadows that gets one (computed on the host, once)."""
FACTORIES = frozenset({torch.ops.aten.arange, torch.ops.aten.full, torch.ops.aten.zeros, torch.ops.aten.ones,
                       torch.ops.aten.scalar_tensor})
"""Ops whose values depend only on their arguments, wherever they run (`empty` and the random ones do not)."""
SHAPE_FACTORIES = frozenset({torch.ops.aten.zeros_like, torch.ops.aten.ones_like, torch.ops.aten.full_like,
                             torch.ops.aten.new_zeros, torch.ops.aten.new_ones, torch.ops.aten.new_full})
"""Factories whose values depend on their arguments and their tensor argument's shape and dtype, not on its values
(Megatron's routing map starts as `zeros_like(logits)`)."""

Everyone = Callable[[int], torch.Tensor]
"""A global rank -> the values that rank's program holds in the same place (each rank's shadow)."""


class Pending:
    """Values known once other ranks have reached a point of their programs; computed at most once, when
    first resolved. Resolves to None where they turn out unknown (a rank had no values to give)."""

    __slots__ = ("_compute", "_resolved", "_values")

    def __init__(self, compute: Callable[[], torch.Tensor | None]) -> None:
        self._compute = compute
        self._resolved = False
        self._values: torch.Tensor | None = None

    def resolve(self) -> torch.Tensor | None:
        if not self._resolved:
            self._values, self._resolved, self._compute = self._compute(), True, None
        return self._values


def _view(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def _offset_inside(view: tuple, numel: int, target: tuple) -> int | None:
    """Where the view `target` (`_view` of a tensor) starts inside the contiguous `view` holding `numel`
    elements, if it reads only elements of it."""
    shape, stride, offset, dtype = view
    t_shape, t_stride, t_offset, t_dtype = target
    if dtype != t_dtype or tuple(stride) != contiguous_strides(shape):
        return None
    first = t_offset - offset
    last = first + sum((n - 1) * s for n, s in zip(t_shape, t_stride) if n > 0)
    if 0 in t_shape or any(s < 0 for s in t_stride) or first < 0 or last >= numel:
        return None
    return first


def _inside(view: tuple, values: torch.Tensor, target: tuple) -> torch.Tensor | None:
    """The values of the view `target` (`_view` of a tensor), if it reads only elements of the contiguous
    `view` whose values are known."""
    first = _offset_inside(view, values.numel(), target)
    if first is None:
        return None
    return torch.as_strided(values.reshape(-1), target[0], target[1], first).clone()


class Shadows:
    """Fake storage -> (the view written, its real host values, every rank's values if known)."""

    def __init__(self) -> None:
        self._by_storage: dict[int, tuple[tuple, torch.Tensor, Everyone | None]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_storage)

    def remember(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """`dst` (fake, on the GPU) now holds `src`'s values (a real host tensor)."""
        key = dst.untyped_storage()._cdata
        if src.numel() * dst.element_size() > MAX_SHADOW_BYTES or src.is_meta or isinstance(src, FakeTensor):
            self._by_storage.pop(key, None)
            return
        with torch._C._DisableTorchDispatch():
            values = src.detach().to(dtype=dst.dtype).expand(dst.shape).clone()
        self._by_storage[key] = (_view(dst), values, None)

    def _known(self, t: torch.Tensor) -> tuple[torch.Tensor, Everyone | None] | None:
        """`t`'s real values and every rank's, if known: `t` is the view written (from the host, or by an
        op on shadowed inputs) and unchanged since, or lies inside it (a slice or an element read back on its
        own)."""
        entry = self._by_storage.get(t.untyped_storage()._cdata)
        if entry is None:
            return None
        view, values, everyone = entry
        if view != _view(t):
            if isinstance(values, Pending):
                if _offset_inside(view, _numel_of(view), _view(t)) is None:
                    return None
                values = Pending(functools.partial(_pending_inside, view, values, _view(t)))
                return values, None
            values = _inside(view, values, _view(t))
            if values is None:
                return None
            if everyone is not None:
                everyone = functools.partial(_view_of_everyone, everyone, view, _view(t))
        return values, everyone

    def _is_known(self, t: torch.Tensor) -> bool:
        """`self._known(t) is not None`, without computing the values of a view inside the view written."""
        entry = self._by_storage.get(t.untyped_storage()._cdata)
        if entry is None:
            return False
        view, values, _ = entry
        target = _view(t)
        if view == target:
            return True
        numel = _numel_of(view) if isinstance(values, Pending) else values.numel()
        return _offset_inside(view, numel, target) is not None

    def lookup(self, t: torch.Tensor, *, synced: bool = True) -> torch.Tensor | None:
        """The real values of fake `t`, if known. `synced`: the host has waited for the GPU work that wrote
        `t`, so values other ranks supply can be read (module Note); otherwise those read as unknown."""
        known = self._known(t)
        if known is None:
            return None
        values = known[0]
        if isinstance(values, Pending):
            return values.resolve() if synced else None
        return values

    def set_pending(self, t: torch.Tensor, values: Pending) -> None:
        """`t` will hold `values`, once they can be read (module Note)."""
        self._by_storage[t.untyped_storage()._cdata] = (_view(t), values, None)

    def everyone(self, t: torch.Tensor) -> Everyone | None:
        """Every rank's values of `t`, if known by construction."""
        known = self._known(t)
        return None if known is None else known[1]

    def set(self, t: torch.Tensor, values: torch.Tensor, *, everyone: Everyone | None = None) -> None:
        """`t` holds `values` on this rank (and `everyone(r)` on rank r, if given)."""
        self._by_storage[t.untyped_storage()._cdata] = (_view(t), values, everyone)

    def _real_inputs(self, func, flat: list) -> tuple[list, list] | None:
        """The op's flattened arguments with each fake tensor replaced by its values (or `Pending` values), and
        each fake tensor's every-rank values (None where not known that way); None if a fake tensor's values
        are not known."""
        shaped_by_input = func.overloadpacket in SHAPE_FACTORIES
        factory = shaped_by_input or func.overloadpacket in FACTORIES
        real, per_rank = [], []
        for a in flat:
            if isinstance(a, FakeTensor):
                known = self._known(a)
                if known is None and shaped_by_input:  # its shape and dtype alone matter
                    with torch._C._DisableTorchDispatch():
                        stand_in = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
                    known = (stand_in, functools.partial(_same, stand_in))
                if known is None:
                    return None
                real.append(known[0])
                per_rank.append(known[1])
            elif isinstance(a, torch.Tensor) and not (a.device.type == "cpu" and a.dim() == 0):
                return None
            elif isinstance(a, torch.device) and a.type != "cpu":
                if not factory:
                    return None
                real.append(torch.device("cpu"))  # a factory's values do not depend on where it runs
            else:
                real.append(a)
        return real, per_rank

    def real_result(self, func, args: tuple, kwargs: dict) -> object | None:
        """What `func` returns on the known values of its fake tensor inputs (the op run on the host), or None
        if some input's values are not known, or only pending (module Note: they could be read only after the
        host waits): for ops whose output shape depends on the values (`nonzero`, `masked_select`), where the
        fake tensor cannot say."""
        flat, spec = tree_flatten((args, kwargs))
        inputs = self._real_inputs(func, flat)
        if inputs is None or any(isinstance(r, Pending) for r in inputs[0]):
            return None
        return _call_real(func, spec, inputs[0])

    def propagate(self, func, args: tuple, kwargs: dict, tensors: list, out) -> bool:
        """Run `func` for real if every fake tensor input has a shadow; shadow its results. `tensors`: the
        op's tensor arguments. Returns whether it did (then the op's written inputs keep valid shadows)."""
        if func.overloadpacket not in SHAPE_FACTORIES:
            for t in tensors:
                if isinstance(t, FakeTensor) and not self._is_known(t):
                    return False  # the usual answer, without flattening the arguments
        flat, spec = tree_flatten((args, kwargs))
        inputs = self._real_inputs(func, flat)
        if inputs is None:
            return False
        real, per_rank = inputs
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if not outs or any(not isinstance(o, FakeTensor) or o.numel() * o.element_size() > MAX_COMPUTED_SHADOW_BYTES
                           for o in outs):
            return False
        if any(isinstance(r, Pending) for r in real):
            results = Pending(functools.partial(_run_pending, func, spec, real))
            for i, o in enumerate(outs):
                self.set_pending(o, Pending(functools.partial(_nth_pending, results, i)))
            return True
        results = _run_real(func, spec, real)
        rank_results = None
        if all(e is not None for e in per_rank):
            # the fake inputs' places only: holding them would keep their storages alive in the memory model
            places = tuple(_FAKE if isinstance(a, FakeTensor) else r for a, r in zip(flat, real))
            rank_results = functools.lru_cache(maxsize=8)(functools.partial(_run_for_rank, func, spec, places, per_rank))
        for i, (o, r) in enumerate(zip(outs, results)):
            everyone = None if rank_results is None else functools.partial(_nth, rank_results, i)
            self.set(o, r, everyone=everyone)
        return True

    def all_to_all(self, inp: torch.Tensor, out: torch.Tensor, rank: int, group: list[int], splits: tuple) -> None:
        """`out` of an all-to-all of `inp` among the global ranks `group` (this one is `group[rank]`): known
        when every rank's `inp` is known and every split is even (None or equal blocks): group rank r
        receives block r of each member's input."""
        known = self._known(inp)
        size = len(group)
        if known is None or known[1] is None or isinstance(known[0], Pending) or inp.shape[0] % size:
            return
        block = inp.shape[0] // size
        if any(s is not None and list(s) != [block] * size for s in splits):
            return
        everyone = functools.partial(_received, known[1], tuple(group))
        self.set(out, everyone(group[rank]), everyone=everyone)

    def all_gather(self, inp: torch.Tensor, out: torch.Tensor, group: list[int]) -> None:
        """`out` of an all-gather (along dim 0) of `inp` among the global ranks `group`: known when every
        member's `inp` is known by construction, as the members' values in group order."""
        known = self._known(inp)
        if (known is None or known[1] is None or isinstance(known[0], Pending)
                or out.shape[0] != inp.shape[0] * len(group)):
            return
        everyone = functools.partial(_gathered, known[1], tuple(group))
        self.set(out, everyone(group[0]), everyone=everyone)

    def drop(self, storage_key: int) -> None:
        self._by_storage.pop(storage_key, None)

    def forget(self, tensors: list[torch.Tensor]) -> None:
        """The GPU wrote these tensors' storages."""
        for t in tensors:
            if isinstance(t, FakeTensor):
                self._by_storage.pop(t.untyped_storage()._cdata, None)


@functools.cache
def makes_known_values(func) -> bool:
    """A factory whose values its arguments, or its input's shape, decide: with no shadow anywhere (`not shadows`),
    the only ops that could run on shadows."""
    return func.overloadpacket in FACTORIES or func.overloadpacket in SHAPE_FACTORIES


def _numel_of(view: tuple) -> int:
    shape = view[0]
    n = 1
    for d in shape:
        n *= d
    return n


def _pending_inside(view: tuple, values: Pending, target: tuple) -> torch.Tensor | None:
    resolved = values.resolve()
    return None if resolved is None else _inside(view, resolved, target)


def _run_pending(func, spec, real: list) -> list[torch.Tensor] | None:
    """`func` on its inputs' values once they resolve; None if one of them is unknown."""
    resolved = [r.resolve() if isinstance(r, Pending) else r for r in real]
    if any(r is None for r, a in zip(resolved, real) if isinstance(a, Pending)):
        return None
    return _run_real(func, spec, resolved)


def _nth_pending(results: Pending, i: int) -> torch.Tensor | None:
    resolved = results.resolve()
    return None if resolved is None else resolved[i]


def _histc_of_integers(t: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    """`histc` as CUDA computes it for integer inputs (CPU's histc takes floating point only): exact for
    integers below 2**53, in the input's dtype."""
    if t.dtype.is_floating_point:
        return torch.histc(t, bins, min, max)
    return torch.histc(t.double(), bins, min, max).to(t.dtype)


CPU_STAND_INS = {torch.ops.aten.histc.default: _histc_of_integers}
"""Ops whose CPU kernels refuse dtypes their CUDA kernels take: a stand-in with the CUDA kernel's result."""


def _call_real(func, spec, real: list) -> object:
    """`func` on real values (flattened arguments `real`, `spec` their structure), on the host."""
    r_args, r_kwargs = tree_unflatten(real, spec)
    with torch._C._DisableTorchDispatch():
        return CPU_STAND_INS.get(func, func)(*r_args, **r_kwargs)


def _run_real(func, spec, real: list) -> list[torch.Tensor]:
    """`func` on real values (flattened arguments `real`): its tensor results, flattened."""
    return [x for x in tree_flatten(_call_real(func, spec, real))[0] if isinstance(x, torch.Tensor)]


_FAKE = object()
"""Marks where a fake tensor input was, in the arguments `_run_for_rank` keeps."""


def _run_for_rank(func, spec, places: tuple, per_rank: list, rank: int) -> list[torch.Tensor]:
    """`func`'s results on `rank`: the fake inputs (`_FAKE` in `places`) replaced by that rank's values, in order."""
    values = iter(per_rank)
    real = [next(values)(rank) if a is _FAKE else a for a in places]
    return _run_real(func, spec, real)


def _nth(results: Callable[[int], list[torch.Tensor]], i: int, rank: int) -> torch.Tensor:
    return results(rank)[i]


def _view_of_everyone(everyone: Everyone, view: tuple, target: tuple, rank: int) -> torch.Tensor:
    return _inside(view, everyone(rank), target)


def _same(values: torch.Tensor, rank: int) -> torch.Tensor:
    """The same values on every rank."""
    return values


def _gathered(everyone: Everyone, group: tuple[int, ...], rank: int) -> torch.Tensor:
    """What every member of `group` holds after an all-gather (the same on all): each member's values, in order."""
    return torch.cat([everyone(member) for member in group])


def _received(everyone: Everyone, group: tuple[int, ...], rank: int) -> torch.Tensor:
    """What global `rank` receives in an even all-to-all among `group`: its block of each member's input."""
    mine = group.index(rank)
    return torch.cat([everyone(member).chunk(len(group))[mine] for member in group])


shadows = Shadows()
