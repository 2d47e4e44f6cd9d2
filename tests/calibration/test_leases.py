"""benchmarks/host/leases.py: telling the leases' speed from the configurations' in the ground truth."""

import json
import math
import random

import pytest

from benchmarks.host import leases


def test_fit_recovers_lease_and_configuration_effects():
    """Runs made of known terms (leases that each ran some configurations, with noise) give those terms back,
    the lease effects relative to their mean."""
    rng = random.Random(7)
    terms = {"a": math.log(20.0), "b": math.log(300.0), "c": math.log(90.0)}
    effects = {"2026-11-21-01": 0.10, "2026-11-21-02": -0.15, "2026-11-22-01": 0.05, "2026-11-22-02": 0.0}
    ran = {"2026-11-21-01": "abc", "2026-11-21-02": "ab", "2026-11-22-01": "bc", "2026-11-22-02": "ac"}
    obs = [(row, lease, terms[row] + effects[lease] + rng.gauss(0, 0.005))
           for lease, rows in ran.items() for row in rows for _ in range(3)]
    fitted_terms, fitted_effects, spread = leases.fit(obs)
    mean_effect = sum(effects.values()) / len(effects)
    for lease, effect in effects.items():
        assert fitted_effects[lease] == pytest.approx(effect - mean_effect, abs=0.01)
    for row, term in terms.items():
        assert fitted_terms[row] == pytest.approx(term + mean_effect, abs=0.01)
    assert sum(fitted_effects.values()) == pytest.approx(0, abs=1e-9)
    assert spread < 0.01


def test_runs_name_their_lease():
    assert leases.lease_of("2026-11-22-05/r1tp4") == "2026-11-22-05"
    assert leases.lease_of("2026-11-22-24/g1") == "2026-11-22-24"
    assert leases.lease_of("2026-11-21-01") == "2026-11-21-01"
    with pytest.raises(ValueError, match="names no lease"):
        leases.lease_of("g1")


def test_measurements_name_their_lease():
    """A rerun's folder names its lease; a first measurement's meta.json does; the first timelines, taken on three
    leases, are listed."""
    timelines = leases.DATA / "e2e" / "timelines"
    assert leases.lease_of_path(str(timelines / "runs" / "2026-11-22-24" / "llama_l1b_tp4")) == "2026-11-22-24"
    assert leases.lease_of_path(str(timelines / "runs" / "2026-11-22-34" / "r2" / "timeline" / "llama_l1b_tp2")) \
        == "2026-11-22-34"
    assert leases.lease_of_path(str(timelines / "llama_l1b_tp4")) == "2026-11-22-05"
    assert leases.lease_of_path(str(timelines / "llama_l1b_fsdp4")) is None
    launch_bound = leases.DATA / "host" / "launch_bound"
    assert leases.lease_of_path(str(launch_bound / "launch_bound.json")) == \
        json.loads((launch_bound / "meta.json").read_text())["lease"]


def test_every_indexed_lease_has_its_probes():
    """Each lease of the index is one of data/h200/host/leases/runs/ or of the ground truth's runs/: a lease id
    names a real lease, not a guess."""
    known = {p.name for p in (leases.DATA / "host" / "leases" / "runs").iterdir()}
    known |= {p.name for p in (leases.DATA / "e2e" / "groundtruth" / "runs").iterdir()}
    assert set(leases.lease_index()) - known <= set(leases.FIRST_TIMELINES.values())


def test_frozen_index_is_what_the_ground_truth_gives():
    """data/h200/host/leases/lease_index.json is the fit of the ground truth as it stands: a run imported since
    means the index, and then the host model's fits, must be redone (leases.py --write, then the fits)."""
    configs = json.loads(leases.CONFIGS.read_text())["configs"]
    _, effects, _ = leases.fit(leases.observations(configs))
    frozen = leases.lease_index()
    assert set(frozen) == set(effects)
    for lease, effect in effects.items():
        assert frozen[lease] == pytest.approx(math.exp(effect), abs=1e-4)
