"""benchmarks/h200/leases.py: telling the leases' speed from the configurations' in the ground truth."""

import math
import random

import pytest

from tests.support.benchmark_modules import load_benchmark

leases = load_benchmark("benchmarks/h200/leases.py")


def test_fit_recovers_lease_and_configuration_effects():
    """Runs made of known terms (leases that each ran some configurations, with noise) give those terms back,
    the lease effects relative to their mean."""
    rng = random.Random(7)
    terms = {"a": math.log(20.0), "b": math.log(300.0), "c": math.log(90.0)}
    effects = {"call1": 0.10, "call2": -0.15, "call3": 0.05, "call4": 0.0}
    ran = {"call1": "abc", "call2": "ab", "call3": "bc", "call4": "ac"}
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
    assert leases.lease_of("call8r1tp4") == "call8"
    assert leases.lease_of("call27g1") == "call27"
    assert leases.lease_of("call4p2") == "call4"
    with pytest.raises(ValueError, match="names no device call"):
        leases.lease_of("session5")


def test_timelines_name_their_lease():
    data = leases.REPO / "data" / "h200"
    assert leases.lease_of_path(str(data / "call27" / "timeline" / "llama_l1b_tp4")) == "call27"
    assert leases.lease_of_path(str(data / "call38" / "r2" / "timeline" / "llama_l1b_tp2")) == "call38"
    assert leases.lease_of_path(str(data / "timeline" / "llama_l1b_tp4")) == "call8"
    assert leases.lease_of_path(str(data / "timeline" / "llama_l1b_fsdp4")) is None


def test_frozen_index_is_what_the_ground_truth_gives():
    """data/h200/lease_index.json is the fit of the ground truth as it stands: a run imported since means the
    index, and then the host model's fits, must be redone (leases.py --write, then the fits)."""
    import json
    configs = json.loads(leases.CONFIGS.read_text())["configs"]
    _, effects, _ = leases.fit(leases.observations(configs))
    frozen = leases.lease_index()
    assert set(frozen) == set(effects)
    for lease, effect in effects.items():
        assert frozen[lease] == pytest.approx(math.exp(effect), abs=1e-4)
