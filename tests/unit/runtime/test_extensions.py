"""CUDA extensions built at run time get a stand-in or a one-line error (runtime/extensions.py Note [CUDA
extensions]); the stand-in's kernel itself is checked end to end with DeepSpeed's FusedAdam."""

import pytest

from phantora.runtime.extensions import _load, _load_inline


def _never_built(*args, **kwargs):
    raise AssertionError("the extension was built")


def test_deepspeed_fused_adam_gets_a_stand_in():
    sources = ["/x/deepspeed/ops/csrc/adam/fused_adam_frontend.cpp", "/x/deepspeed/ops/csrc/adam/multi_tensor_adam.cu"]
    module = _load(_never_built, "fused_adam", sources, extra_cflags=["-O3"])
    assert callable(module.multi_tensor_adam)


def test_other_cuda_extensions_are_refused_by_name():
    sources = ["/x/deepspeed/ops/csrc/lamb/fused_lamb_cuda.cpp", "/x/deepspeed/ops/csrc/lamb/fused_lamb_cuda_kernel.cu"]
    with pytest.raises(NotImplementedError, match="'fused_lamb'.*torch_adam"):
        _load(_never_built, "fused_lamb", sources)
    with pytest.raises(NotImplementedError, match="'mine'"):
        _load(_never_built, "mine", ["a.cpp"], with_cuda=True)
    with pytest.raises(NotImplementedError, match="'inline'"):
        _load_inline(_never_built, "inline", "int f();", cuda_sources="__global__ void k() {}")


def test_host_extensions_build_as_usual():
    built = []
    assert _load(lambda *a, **k: built.append(a) or "module", "host_op", ["op.cpp"]) == "module"
    assert built == [("host_op", ["op.cpp"])]

