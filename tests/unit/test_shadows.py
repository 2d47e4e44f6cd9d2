"""Known values of small GPU tensors (runtime/shadows.py Note [Shadow values]) and the balanced
placeholder of `bincount` (runtime/handlers.py Note [Balanced routing])."""

import torch

from phantora.runtime.handlers import balanced_counts
from phantora.runtime.shadows import _inside


def test_balanced_counts_spread_the_remainder_over_the_first_bins():
    assert balanced_counts(10, 4).tolist() == [3, 3, 2, 2]
    assert balanced_counts(8, 8).tolist() == [1] * 8
    assert int(balanced_counts(12345, 7).sum()) == 12345


def test_a_view_inside_a_known_contiguous_write_reads_its_values():
    storage = torch.empty(12, device="meta")
    written = storage.as_strided((3, 4), (4, 1), 0)
    values = torch.arange(12.0).reshape(3, 4)
    view = (tuple(written.shape), tuple(written.stride()), 0, torch.float32)
    element = torch.empty(12).as_strided((), (), 5)  # what `tolist()` reads: one element at a time
    assert _inside(view, values, element).item() == 5.0
    column = torch.empty(12).as_strided((3,), (4,), 1)
    assert _inside(view, values, column).tolist() == [1.0, 5.0, 9.0]


def test_a_view_reaching_outside_the_known_write_or_of_another_dtype_has_no_values():
    values = torch.arange(4.0)
    view = ((4,), (1,), 2, torch.float32)  # elements 2..5 of the storage are known
    assert _inside(view, values, torch.empty(8).as_strided((2,), (1,), 1)) is None
    assert _inside(view, values, torch.empty(8).as_strided((2,), (1,), 5)) is None
    assert _inside(view, values, torch.empty(8, dtype=torch.int32).as_strided((1,), (1,), 3)) is None
    assert _inside(view, values, torch.empty(8).as_strided((2,), (1,), 4)).tolist() == [2.0, 3.0]
