"""runtime/distributed.py check_symmetry: which groups stop a representative rank for the launcher to refine."""

import json
from types import SimpleNamespace

import pytest

from phantora.protocol.symmetry import BROKEN_SYMMETRY_EXIT_CODE, BROKEN_SYMMETRY_FILE, RankSymmetry
from phantora.runtime import distributed


class Stopped(Exception):
    """os._exit, made catchable."""


@pytest.fixture
def one_representative_of_16(monkeypatch, tmp_path):
    monkeypatch.setattr(distributed, "_symmetry", RankSymmetry(16, 1))
    monkeypatch.setattr(distributed, "_session", SimpleNamespace(config=SimpleNamespace(rank_dir=tmp_path)))

    def stop(code):
        raise Stopped(code)

    monkeypatch.setattr(distributed.os, "_exit", stop)
    return tmp_path


def test_a_fake_backend_group_fits_any_period(one_representative_of_16):
    """torch's fake process group exchanges nothing (TorchTitan builds its unused mesh dimensions on it)."""
    distributed.check_symmetry((0, 5), backend="fake")
    distributed.check_symmetry((0, 5), backend="cpu:fake,cuda:fake")
    assert not (one_representative_of_16 / BROKEN_SYMMETRY_FILE).exists()


@pytest.mark.parametrize("backend", ["gloo", "cpu:gloo,cuda:fake", "nccl"])
def test_a_group_the_period_cannot_stand_for_stops_the_rank(one_representative_of_16, backend):
    with pytest.raises(Stopped) as stopped:
        distributed.check_symmetry((0, 5), backend=backend)
    assert stopped.value.args == (BROKEN_SYMMETRY_EXIT_CODE,)
    assert json.loads((one_representative_of_16 / BROKEN_SYMMETRY_FILE).read_text())["backend"] == backend
