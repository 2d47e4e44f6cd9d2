"""The dispatch cache builds what FakeTensorMode's cache builds, and keys only what it can key as FakeTensorMode
does (runtime/dispatch_cache.py Note [Replaying FakeTensorMode's cache])."""

import pytest
import torch
from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensor, FakeTensorMode

from phantora.runtime.dispatch_cache import DispatchCache

aten = torch.ops.aten


def run_and_learn(cache: DispatchCache, mode: FakeTensorMode, func, args: tuple, kwargs: dict):
    key = cache.key(func, args, kwargs)
    assert key is not None
    fake_mode_key = cache.fake_mode_key(func, args, kwargs)
    with mode:
        out = func(*args, **kwargs)
    cache.learn(key, fake_mode_key, func, args, kwargs, out)
    return key, out


def describe(t: torch.Tensor, inputs: tuple) -> tuple:
    """Metadata, and which input (if any) `t` is or shares its storage with."""
    storage = t.untyped_storage()._cdata
    shares = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.untyped_storage()._cdata == storage]
    same = [i for i, a in enumerate(inputs) if a is t]
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad, type(t), shares, same)


def test_outputs_match_fake_tensor_mode():
    """(Fake CPU tensors: the cache does not look at devices beyond keying them.)"""
    mode = FakeTensorMode()
    cache = DispatchCache(mode)
    with mode:
        x = torch.empty(8, 6, device="cpu")
        y = torch.empty(8, 6, device="cpu")
    calls = [
        (aten.add.Tensor, (x, y), {}),
        (aten.add_.Tensor, (x, y), {}),
        (aten.t.default, (x,), {}),
        (aten.slice.Tensor, (x, 0, 2, 5), {}),
        (aten.native_layer_norm.default, (x, [6], None, None, 1e-5), {}),  # a tuple of results
        (aten._to_copy.default, (x,), {"dtype": torch.bfloat16}),
        (aten.as_strided.default, (x, [4, 2], [1, 4], 3), {}),
        # Note [Ops FakeTensorMode does not cache]: a list of new tensors; a result on its input's storage
        (aten._foreach_sqrt.default, ([x, y, x[1:]],), {}),
        (aten._unsafe_view.default, (x, [48]), {}),
    ]
    for func, args, kwargs in calls:
        key, first = run_and_learn(cache, mode, func, args, kwargs)
        cached = cache.lookup(key)
        assert cached is not None, func
        replayed = cache.outputs(cached, func, args)
        with mode:
            expected = func(*args, **kwargs)
        assert type(replayed) is type(expected), func
        flat = lambda v: list(v) if isinstance(v, (tuple, list)) else [v]  # noqa: E731
        inputs = (*args, *args[0], *kwargs.values()) if isinstance(args[0], list) else (*args, *kwargs.values())
        assert [describe(r, inputs) for r in flat(replayed)] == [describe(e, inputs) for e in flat(expected)], func


def test_arguments_it_cannot_key_like_fake_tensor_mode():
    mode, other = FakeTensorMode(), FakeTensorMode()
    cache = DispatchCache(mode)
    with mode:
        x = torch.empty(4, device="cpu")
    with other:
        foreign = torch.empty(4, device="cpu")
    assert cache.key(aten.add.Tensor, (x, x), {}) is not None
    assert cache.key(aten.add.Tensor, (x, torch.ones(4)), {}) is None  # a real tensor
    assert cache.key(aten.add.Tensor, (x, foreign), {}) is None  # another mode's fake tensor
    assert cache.key(aten.randperm.generator, (4,), {"generator": torch.Generator()}) is None
    # the same values of two types are two keys, as for FakeTensorMode (1 and 1.0 make different dtypes)
    assert cache.key(aten.add.Scalar, (x, 1), {}) != cache.key(aten.add.Scalar, (x, 1.0), {})
    # what FakeTensorMode keys by, beyond shape and dtype: strides, storage offset and size, requires_grad
    with mode:
        strided = torch.empty(8, device="cpu")[::2]
        offset = torch.empty(5, device="cpu")[1:]
        trained = torch.empty(4, device="cpu").requires_grad_()
    keys = {cache.key(aten.neg.default, (t,), {}) for t in (x, strided, offset, trained)}
    assert len(keys) == 4


def test_ops_fake_tensor_mode_does_not_cache_are_not_served():
    mode = FakeTensorMode()
    cache = DispatchCache(mode)
    with mode:
        x = torch.empty(4, 6, device="cpu")
    key, _ = run_and_learn(cache, mode, aten.mul.out, (x, x), {"out": x})
    assert cache.knows(key) and cache.lookup(key) is None
    with pytest.raises(DynamicOutputShapeException):  # nonzero of unknown values: a call that fails learns nothing
        run_and_learn(cache, mode, aten.nonzero.default, (x,), {})
    assert not cache.knows(cache.key(aten.nonzero.default, (x,), {}))


def test_fake_tensors_built_like_fake_tensor_mode_builds_them():
    """Note [Building fake tensors]: the second tensor of a device on is built without FakeTensor's constructor."""
    mode = FakeTensorMode()
    cache = DispatchCache(mode)
    device = torch.device("cpu")
    meta = lambda: torch.empty(3, 5, device="meta", requires_grad=True)  # noqa: E731
    cache._fake(meta(), device)
    built, expected = cache._fake(meta(), device), FakeTensor(mode, meta(), device)
    assert type(built) is FakeTensor and vars(built) == vars(expected)
    assert torch._C._dispatch_key_set(built) == torch._C._dispatch_key_set(expected)
    assert (built.device, built.requires_grad, built.shape, built.stride()) == \
        (expected.device, expected.requires_grad, expected.shape, expected.stride())
    with pytest.warns(UserWarning, match="data pointer of FakeTensor"):  # as FakeTensor's constructor guards it
        built.data_ptr()


def test_in_place_foreach_ops_are_keyed_by_their_floats_types():
    """Note [Optimizer steps]: a step size new in every step does not make a new key; other scalars' values do."""
    mode = FakeTensorMode()
    cache = DispatchCache(mode)
    with mode:
        params = [torch.empty(3, device="cpu"), torch.empty(4, device="cpu")]
    key = lambda func, *args: cache.key(func, (params, *args), {})  # noqa: E731
    assert key(aten._foreach_add_.Scalar, 0.1) == key(aten._foreach_add_.Scalar, 0.2)
    assert key(aten._foreach_add_.Scalar, 0.1) != key(aten._foreach_add_.Scalar, 1)
    assert key(aten._foreach_pow_.Scalar, -1) != key(aten._foreach_pow_.Scalar, 2)
    assert key(aten._foreach_add.Scalar, 0.1) != key(aten._foreach_add.Scalar, 0.2)  # returns tensors: values kept
    k, _ = run_and_learn(cache, mode, aten._foreach_mul_.Scalar, (params, 0.9), {})
    assert cache.lookup(k) is not None and not cache.lookup(k).keyed_by_values  # its costs follow its values
