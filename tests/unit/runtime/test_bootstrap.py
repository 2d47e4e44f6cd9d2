"""A rank process always reports to the launcher's coordinator: it never hosts one itself."""

import pytest

from phantora.config.run import RankConfig
from phantora.runtime.bootstrap import connect


def test_a_rank_without_a_coordinator_is_told_to_start_through_phantora_run():
    with pytest.raises(RuntimeError, match="phantora run"):
        connect(RankConfig(gpu="h200"))
