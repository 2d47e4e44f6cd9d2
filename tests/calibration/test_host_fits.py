"""The host model's context terms: what benchmarks/host/fit_context.py fits on the launch-bound steps measured on
the H200 (data/h200/host/launch_bound/) is what the model ships, and the model predicts those steps; the tokenizer's
fit (benchmarks/host/fit_tokenizer.py)."""

import statistics

import pytest

from benchmarks.common.paths import REPO
from benchmarks.host import fit_context as fit
from benchmarks.host import fit_tokenizer
from benchmarks.host.fit_contention import uncontended_probe_us
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value


def test_fitted_constants_are_what_the_measurements_give():
    """H200_HOST's fitted terms are what benchmarks/host/fit_context.py derives from the launch-bound
    steps measured on the H200 (data/h200/host/launch_bound/ and its interleaved rerun) and their simulated counts."""
    measured, counts = fit.load()
    fitted = fit.fit(measured, {n: counts[n] for n in measured})
    assert fitted == {name: getattr(H200_HOST, name) for name in fit.FITTED}


def test_launch_bound_host_time_matches_measurements():
    """Host time per step (all phases but the final synchronize) of the 12 measured launch-bound
    variants: nanoGPT and Llama at 1-28 layers, autocast or not, fused or foreach AdamW, with or
    without a DataLoader. Measured steps varied by +-20% around their median on that machine."""
    measured, counts = fit.load()
    errors = {}
    for name, m in measured.items():
        predicted = fit.predict(counts[name], {k: getattr(H200_HOST, k) for k in fit.FITTED})
        host = sum(v for p, v in m["phase_ms_median"].items() if p != "sync")
        errors[name] = (sum(v for p, v in predicted.items() if p != "sync") - host) / host
    assert statistics.median(abs(e) for e in errors.values()) < 0.12, errors
    assert max(abs(e) for e in errors.values()) < 0.25, errors
    for name in ("nano_script", "llama_script", "llama_phases28"):  # the workloads as the scripts run them
        assert abs(errors[name]) < 0.15, errors


def test_each_variant_left_out_is_predicted_by_a_fit_on_the_others():
    """Issue 27's leave-one-configuration-out error of the host model: each variant's host time from constants
    fitted without it, which differ from the full fit's; the DataLoader pair alone has nothing else to fit on."""
    measured, counts = fit.load()
    rows = {name: (in_sample, out) for name, in_sample, out in fit.leave_one_out(measured,
                                                                                  {n: counts[n] for n in measured})}
    assert set(rows) == set(measured) and rows[fit.LOADER_PAIR][1] is None
    left_out = {name: out for name, (_, out) in rows.items() if out is not None}
    assert all(out != rows[name][0] for name, out in left_out.items())
    assert statistics.fmean(abs(e) for e in left_out.values()) < 15
    assert max(abs(e) for e in left_out.values()) < 25


def test_a_counting_runs_phase_reads_back_as_its_counts():
    """benchmarks/host/counting.py: a phase's time in a counting run over its base is the counts' charges (10^13,
    10^10 and 10^7 ns a count), less a GPU wait of the base that the counting run's host time hid (a phase ending
    in a synchronize); anything else is not a whole count and is refused."""
    from benchmarks.host.counting import decode

    counted = ("nodes", "calls", "steps")
    charges_ms = (1530 * 10**13 + 284 * 10**10 + 1 * 10**7) / 1e6
    assert decode(2.0, 2.0 + charges_ms, counted) == {"nodes": 1530, "calls": 284, "steps": 1}
    assert decode(3.385, 0.49, counted) == {"nodes": 0, "calls": 0, "steps": 0}  # the base's 2.9 ms GPU tail
    assert decode(3.0, 3.0 + charges_ms - 2.9, counted) == {"nodes": 1530, "calls": 284, "steps": 1}
    with pytest.raises(RuntimeError, match="not a whole count"):
        decode(2.0, 2.0 + charges_ms + 3.0, counted)


def test_the_tokenizer_fit_reads_each_documents_first_encode_at_the_speed_of_its_own_probe():
    specs = REPO / "src" / "phantora" / "specs"
    unc = uncontended_probe_us()
    row = {"case": "encode", "chars": 1000, "tokens": 800, "seconds": 1e-3, "seconds_repeated": 7e-4}
    fast, slow = fit_tokenizer.at_mean_host([{**row, "probe_us": unc}, {**row, "probe_us": 2 * unc}], specs)
    assert slow["seconds"] == pytest.approx(fast["seconds"] / 2)  # the same time on a host twice as slow
    assert fast["seconds"] > row["seconds"]  # the mean host is slower than the uncontended one
    per_char, per_token = fit_tokenizer.fit(fit_tokenizer.at_mean_host(
        [{**row, "probe_us": unc}, {**row, "chars": 2000, "tokens": 500, "probe_us": unc}], specs))
    assert per_char * 1000 + per_token * 800 == pytest.approx(fast["seconds"])  # the first encode, not the repeats
