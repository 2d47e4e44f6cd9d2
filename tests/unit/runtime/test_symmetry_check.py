"""runtime/distributed.py: which groups stop a representative rank, for the launcher to choose a finer folding."""

import json
from types import SimpleNamespace

import pytest

from phantora.protocol.symmetry import BROKEN_SYMMETRY_EXIT_CODE, BROKEN_SYMMETRY_FILE, RankSymmetry
from phantora.runtime import distributed


class Stopped(Exception):
    """os._exit, made catchable."""


def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store, group_name,
                              backend_options=None, timeout=None, pg_tag=None, device_id=None, group_desc=None):
    """c10d's constructor of groups, as far as the check reads it."""
    return ("created", tuple(global_ranks_in_group), backend)


@pytest.fixture
def rank_0_of_16_folded(monkeypatch, tmp_path):
    monkeypatch.setattr(distributed, "_symmetry", RankSymmetry.folded(16))
    monkeypatch.setattr(distributed, "_used_groups", [])
    monkeypatch.setattr(distributed, "_session", SimpleNamespace(config=SimpleNamespace(rank_dir=tmp_path)))
    monkeypatch.setattr(distributed, "c10d", SimpleNamespace(GroupMember=SimpleNamespace(WORLD=object()),
                                                             get_rank=lambda: 0))

    def stop(code):
        raise Stopped(code)

    monkeypatch.setattr(distributed.os, "_exit", stop)
    return tmp_path


def reported(folder) -> list[dict]:
    return json.loads((folder / BROKEN_SYMMETRY_FILE).read_text())


def test_a_fake_backend_group_fits_any_folding(rank_0_of_16_folded):
    """torch's fake process group exchanges nothing (TorchTitan builds its unused mesh dimensions on it)."""
    create = distributed._checked_group_creation(_new_process_group_helper)
    assert create(2, 0, [0, 5], "fake", None, "g")[0] == "created"
    assert create(2, 0, [0, 5], "cpu:fake,cuda:fake", None, "g")[0] == "created"
    assert distributed._used_groups == [] and not (rank_0_of_16_folded / BROKEN_SYMMETRY_FILE).exists()


@pytest.mark.parametrize("ranks", [[0, 5], []])  # a subgroup, the default group (the world)
def test_a_gloo_group_stops_the_rank_unless_every_member_runs(rank_0_of_16_folded, ranks):
    create = distributed._checked_group_creation(_new_process_group_helper)
    with pytest.raises(Stopped) as stopped:
        create(len(ranks) or 16, 0, ranks, "cpu:gloo,cuda:nccl", None, "g")
    assert stopped.value.args == (BROKEN_SYMMETRY_EXIT_CODE,)
    assert reported(rank_0_of_16_folded) == [{"ranks": ranks or list(range(16)), "whole": True}]


def test_a_simulated_group_stops_the_rank_only_when_used_and_every_group_built_is_reported(rank_0_of_16_folded):
    assert distributed.note_group(tuple(range(16)))  # the world fits
    assert not distributed.note_group((0, 1))  # built, not fitting: no stop until it is used
    with pytest.raises(Stopped):
        distributed.stop_for_symmetry()
    assert reported(rank_0_of_16_folded) == [{"ranks": list(range(16)), "whole": False},
                                              {"ranks": [0, 1], "whole": False}]


def test_a_transfer_to_a_mirror_stops_the_rank_at_once(rank_0_of_16_folded):
    with pytest.raises(Stopped):
        distributed.note_group((0, 8), whole=True, stop=True)
    assert reported(rank_0_of_16_folded)[-1] == {"ranks": [0, 8], "whole": True}
