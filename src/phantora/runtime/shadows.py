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

A shadow is *symmetric* when every rank holds the same values by construction: a placeholder that
does not depend on the rank (Note [Random routing] in runtime/handlers.py) and what ops compute
from symmetric shadows alone. An all-to-all of a symmetric shadow is then known without the other
ranks' data: rank r receives block r of every rank's input, which is block r of its own
(`Shadows.all_to_all`); the result is no longer symmetric.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten, tree_unflatten

MAX_SHADOW_BYTES = 1 << 16


def _view(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _inside(view: tuple, values: torch.Tensor, t: torch.Tensor) -> torch.Tensor | None:
    """`t`'s values, if `t` reads only elements of the contiguous `view` whose values are known."""
    shape, stride, offset, dtype = view
    if dtype != t.dtype or tuple(stride) != _contiguous_strides(shape):
        return None
    first = t.storage_offset() - offset
    last = first + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    if t.numel() == 0 or any(s < 0 for s in t.stride()) or first < 0 or last >= values.numel():
        return None
    return torch.as_strided(values.reshape(-1), tuple(t.shape), tuple(t.stride()), first).clone()


class Shadows:
    """Fake storage -> (the view written, its real host values, whether every rank holds them)."""

    def __init__(self) -> None:
        self._by_storage: dict[int, tuple[tuple, torch.Tensor, bool]] = {}

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
        self._by_storage[key] = (_view(dst), values, False)

    def _known(self, t: torch.Tensor) -> tuple[torch.Tensor, bool] | None:
        """`t`'s real values and whether every rank holds them, if known: `t` is the view written (from
        the host, or by an op on shadowed inputs) and unchanged since, or lies inside it (`tolist()`
        reads elements one by one)."""
        entry = self._by_storage.get(t.untyped_storage()._cdata)
        if entry is None:
            return None
        view, values, symmetric = entry
        if view != _view(t):
            values = _inside(view, values, t)
            if values is None:
                return None
        return values, symmetric

    def lookup(self, t: torch.Tensor) -> torch.Tensor | None:
        """The real values of fake `t`, if known."""
        known = self._known(t)
        return None if known is None else known[0]

    def symmetric(self, t: torch.Tensor) -> bool:
        """Whether `t` has known values that every rank holds alike."""
        known = self._known(t)
        return known is not None and known[1]

    def set(self, t: torch.Tensor, values: torch.Tensor, *, symmetric: bool = False) -> None:
        self._by_storage[t.untyped_storage()._cdata] = (_view(t), values, symmetric)

    def propagate(self, func, flat: list, spec, out) -> bool:
        """Run `func` for real if every fake tensor input has a shadow; shadow its results. `flat`,
        `spec`: the op's (args, kwargs) as `tree_flatten` gives them. Returns whether it did (then
        the op's written inputs keep valid shadows)."""
        real = []
        symmetric = True
        for a in flat:
            if isinstance(a, FakeTensor):
                known = self._known(a)
                if known is None:
                    return False
                real.append(known[0])
                symmetric = symmetric and known[1]
            elif isinstance(a, torch.Tensor) and not (a.device.type == "cpu" and a.dim() == 0):
                return False
            elif isinstance(a, torch.device) and a.type != "cpu":
                return False
            else:
                real.append(a)
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if not outs or any(not isinstance(o, FakeTensor) or o.numel() * o.element_size() > MAX_SHADOW_BYTES
                           for o in outs):
            return False
        r_args, r_kwargs = tree_unflatten(real, spec)
        with torch._C._DisableTorchDispatch():
            result = func(*r_args, **r_kwargs)
        for o, r in zip(outs, [x for x in tree_flatten(result)[0] if isinstance(x, torch.Tensor)]):
            self.set(o, r, symmetric=symmetric)
        return True

    def all_to_all(self, inp: torch.Tensor, out: torch.Tensor, rank: int, size: int, splits: tuple) -> None:
        """`out` of an all-to-all of `inp` among `size` ranks: known when `inp`'s values are the same on
        every rank and every split is even (None or equal blocks): rank r receives block r of its own
        input from each rank."""
        known = self._known(inp)
        if known is None or not known[1] or inp.shape[0] % size:
            return
        block = inp.shape[0] // size
        if any(s is not None and list(s) != [block] * size for s in splits):
            return
        mine = known[0].chunk(size)[rank]
        self.set(out, mine.repeat(size, *([1] * (mine.dim() - 1))))

    def drop(self, storage_key: int) -> None:
        self._by_storage.pop(storage_key, None)

    def forget(self, tensors: list[torch.Tensor]) -> None:
        """The GPU wrote these tensors' storages."""
        for t in tensors:
            if isinstance(t, FakeTensor):
                self._by_storage.pop(t.untyped_storage()._cdata, None)


shadows = Shadows()
