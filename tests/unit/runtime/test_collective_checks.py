"""An all-to-all's split sizes are checked as ProcessGroupNCCL checks them (runtime/distributed.py)."""

import pytest
import torch

from phantora.runtime.distributed import check_split_sizes


def test_split_sizes_that_a_gpu_run_refuses_are_refused_with_its_message():
    rows = torch.empty(10, 3)
    check_split_sizes([4, 6], rows, 2)
    check_split_sizes([], torch.empty(8, 3), 4)
    check_split_sizes(None, torch.empty(8, 3), 4)
    with pytest.raises(RuntimeError, match="Split sizes doesn't match total dim 0 size"):
        check_split_sizes([4, 5], rows, 2)
    with pytest.raises(RuntimeError, match="Number of tensor splits not equal to group size"):
        check_split_sizes([5, 5], rows, 4)
    with pytest.raises(RuntimeError, match="does not divide equally across group size"):
        check_split_sizes(None, rows, 4)


def test_split_sizes_may_be_any_sequence_of_integers_c10d_takes():
    """Megatron-core passes numpy arrays (its all-to-all dispatcher's `.numpy()` of the counts)."""
    import numpy as np

    check_split_sizes(np.array([4, 6]), torch.empty(10, 3), 2)
    check_split_sizes(np.array([], dtype=np.int64), torch.empty(8, 3), 4)
    with pytest.raises(RuntimeError, match="Split sizes doesn't match total dim 0 size"):
        check_split_sizes(np.array([4, 5]), torch.empty(10, 3), 2)
