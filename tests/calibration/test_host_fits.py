"""The host model's context terms: what benchmarks/host/fit_context.py fits on the launch-bound steps measured on
the H200 (data/h200/host/launch_bound/) is what the model ships, and the model predicts those steps."""

import statistics

from benchmarks.host import fit_context as fit
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
