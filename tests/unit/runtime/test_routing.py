"""Drawn routing choices (runtime/routing.py Note [Simulated routing]), the collectives of values every rank
knows, the host stand-ins for CUDA-only dtypes (runtime/shadows.py Note [Shadow values]), and Triton launches on
the simulated GPU (runtime/triton_kernels.py Note [Triton kernels])."""

import functools
import types

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from phantora.models.ops import TensorMeta
from phantora.runtime import routing
from phantora.runtime.shadows import _gathered, _histc_of_integers
from phantora.runtime.triton_kernels import kernel_name, launch_call, simulated_launcher


def test_drawn_topk_indices_are_distinct_per_row_repeat_per_draw_and_rank_and_spread_evenly():
    first = routing.drawn_topk_indices((4096, 2), -1, 8, 0, 0)
    assert first.shape == (4096, 2) and first.dtype == torch.int64
    assert bool((first[:, 0] != first[:, 1]).all()) and 0 <= int(first.min()) and int(first.max()) < 8
    assert torch.equal(first, routing.drawn_topk_indices((4096, 2), -1, 8, 0, 0))
    assert not torch.equal(first, routing.drawn_topk_indices((4096, 2), -1, 8, 4, 0))
    assert not torch.equal(first, routing.drawn_topk_indices((4096, 2), -1, 8, 0, 1))  # each rank its own tokens
    counts = torch.bincount(first.view(-1), minlength=8).float()
    # 8192 choices over 8 experts: 1024 each, binomial spread about 30
    assert counts.sum() == 8192 and float((counts - 1024).abs().max()) < 150 and float(counts.std()) > 5


def test_drawn_topk_indices_follow_the_dimension_and_rows_beyond_one_chunk():
    along_first = routing.drawn_topk_indices((3, 5, 7), 0, 6, 8, 2)
    assert along_first.shape == (3, 5, 7)
    assert bool((along_first[0] != along_first[1]).all() and (along_first[1] != along_first[2]).all())
    many = routing.drawn_topk_indices((routing._ROWS_PER_CHUNK + 3, 1), 1, 4, 0, 0)
    assert many.shape == (routing._ROWS_PER_CHUNK + 3, 1) and int(many.max()) < 4


def test_a_draw_is_numbered_by_the_cuda_generators_offset_which_it_advances(monkeypatch):
    """Activation checkpointing saves and restores the generator's state, so a recomputed router redraws
    its forward's choice."""
    generator = types.SimpleNamespace(offset=8)
    generator.get_offset = lambda: generator.offset
    generator.set_offset = lambda o: setattr(generator, "offset", o)
    monkeypatch.setattr(torch.cuda, "default_generators", (generator,), raising=False)
    assert routing.next_draw(0) == 8 and routing.next_draw(0) == 12 and generator.offset == 16
    generator.set_offset(8)  # the state checkpointing restores before recomputing
    assert routing.next_draw(0) == 8


def test_an_all_gather_of_values_every_rank_knows_is_known_the_same_on_every_rank():
    everyone = lambda rank: torch.arange(3) + 10 * rank  # noqa: E731
    gathered = functools.partial(_gathered, everyone, (1, 3))
    assert gathered(1).tolist() == gathered(3).tolist() == [10, 11, 12, 30, 31, 32]


def test_histc_of_integers_counts_as_cuda_does():
    """CPU histc takes floating point only; CUDA's counts integer expert ids (TorchTitan's router)."""
    ids = torch.tensor([0, 3, 3, 7, 1, 3], dtype=torch.int64)
    counts = _histc_of_integers(ids, 8, 0, 8)
    assert counts.dtype == torch.int64 and counts.tolist() == [1, 1, 0, 3, 0, 0, 0, 1]
    assert _histc_of_integers(torch.tensor([0.5, 1.5]), 2, 0, 2).tolist() == [1.0, 1.0]


class _Recorder:
    def __init__(self):
        self.calls = []

    def before_kernel(self, inputs, written=()):
        self.calls.append(("before", len(inputs), len(written)))

    def launch(self, op, device):
        self.calls.append(("launch", op, device))


def _jit_function(name):
    def fn():
        pass
    fn.__name__ = name
    return types.SimpleNamespace(fn=fn, __name__=name)


def test_a_triton_launch_on_simulated_tensors_is_one_kernel_and_forgets_what_it_may_write():
    kernel = types.SimpleNamespace(fn=_jit_function("_fill_indices_kernel"))  # an autotuner around a JITFunction
    assert kernel_name(kernel) == "triton._fill_indices_kernel"
    with FakeTensorMode():
        counts = torch.empty(16, dtype=torch.int64, device="cuda")
        out = torch.empty(64, dtype=torch.int32, device="cuda")
    recorder, real = _Recorder(), []
    run = simulated_launcher(recorder, kernel, (4,), lambda *a, **k: real.append(a))
    assert run(counts, out, 8, BLOCK_SIZE=128) is None and real == []
    (_, inputs, written), (_, op, device) = recorder.calls
    assert (inputs, written, device) == (2, 2, 0)
    assert op.name == "triton._fill_indices_kernel" and op.outputs == ()
    assert op.args[0] == TensorMeta((16,), "int64", (1,), "cuda") and op.args[2] == 8
    assert dict(op.kwargs) == {"BLOCK_SIZE": 128, "grid": (4,)}
    simulated_launcher(recorder, kernel, (4,), lambda *a, **k: real.append(a))(torch.ones(2))
    assert len(real) == 1  # no simulated tensor: Triton's own launcher
    assert launch_call(kernel, lambda meta: (1,), (), {}).kwargs == ()  # a grid function is not part of the key
