"""Known values of small GPU tensors (runtime/shadows.py Note [Shadow values]) and the
drawn counts of `bincount` (runtime/routing.py Note [Simulated routing])."""

import functools

import torch

from phantora.runtime.routing import random_counts
from phantora.runtime.shadows import Pending, Shadows, _inside, _received, _view


def test_random_counts_repeat_per_draw_and_rank_and_fluctuate_like_uniform_routing():
    first = random_counts(16384, 8, 0, 0)
    assert torch.equal(first, random_counts(16384, 8, 0, 0))
    assert not torch.equal(first, random_counts(16384, 8, 1, 0))
    assert not torch.equal(first, random_counts(16384, 8, 0, 1))  # each rank routes its own tokens
    assert int(first.sum()) == 16384 and first.shape == (8,)
    # binomial spread around 2048: standard deviation sqrt(16384 * 1/8 * 7/8) = 42
    spread = torch.stack([random_counts(16384, 8, d, 0) for d in range(50)]).float().std().item()
    assert 30 < spread < 55
    # a local expert's rows summed over 4 ranks' independent draws: sd 85, and not multiples of 4
    rows = torch.stack([sum(random_counts(16384, 8, d, r) for r in range(4)) for d in range(50)])
    assert 65 < rows.float().std().item() < 105 and bool((rows % 4 != 0).any())


def test_an_all_to_all_of_every_ranks_known_values_is_known_on_every_rank():
    """Rank r receives block r of each member's input (Note [Shadow values]); the result is known for the
    group's other members too, so a further collective of it is known as well."""
    everyone = lambda rank: torch.arange(4) + 10 * rank  # noqa: E731
    group = (0, 2)  # global ranks; blocks of 2
    received = functools.partial(_received, everyone, group)
    assert received(0).tolist() == [0, 1, 20, 21]
    assert received(2).tolist() == [2, 3, 22, 23]


def test_a_view_inside_a_known_contiguous_write_reads_its_values():
    storage = torch.empty(12, device="meta")
    written = storage.as_strided((3, 4), (4, 1), 0)
    values = torch.arange(12.0).reshape(3, 4)
    view = (tuple(written.shape), tuple(written.stride()), 0, torch.float32)
    element = torch.empty(12).as_strided((), (), 5)  # one element read on its own (`t[5].item()`)
    assert _inside(view, values, _view(element)).item() == 5.0
    column = torch.empty(12).as_strided((3,), (4,), 1)
    assert _inside(view, values, _view(column)).tolist() == [1.0, 5.0, 9.0]


def test_a_view_reaching_outside_the_known_write_or_of_another_dtype_has_no_values():
    values = torch.arange(4.0)
    view = ((4,), (1,), 2, torch.float32)  # elements 2..5 of the storage are known
    assert _inside(view, values, _view(torch.empty(8).as_strided((2,), (1,), 1))) is None
    assert _inside(view, values, _view(torch.empty(8).as_strided((2,), (1,), 5))) is None
    assert _inside(view, values, _view(torch.empty(8, dtype=torch.int32).as_strided((1,), (1,), 3))) is None
    assert _inside(view, values, _view(torch.empty(8).as_strided((2,), (1,), 4))).tolist() == [2.0, 3.0]


def test_the_cheap_check_of_known_values_agrees_with_the_values():
    """`Shadows._is_known`, which the recorder asks before every kernel while some values are known, answers as
    `_known` does, for values written and for values other ranks will supply (`Pending`)."""
    for pending in (False, True):
        known = Shadows()
        storage = torch.empty(12)
        written = storage[2:6]
        if pending:
            known.set_pending(written, Pending(lambda: torch.arange(4.0)))
        else:
            known.set(written, torch.arange(4.0))
        for t in (written, storage[3:5], storage[0:3], storage[5:8], storage[2:6].view(2, 2), storage[2:6:2],
                  storage.view(torch.int32)[3:4], torch.empty(4)):
            assert known._is_known(t) == (known._known(t) is not None), (pending, t.shape, t.storage_offset())
