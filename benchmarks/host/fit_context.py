"""Fit the host model's context terms on measured launch-bound steps.

For each variant of `measure_launch_bound.py` measured on the H200 (data/h200/host/launch_bound/), the same
variant runs here under `phantora run` with the fitted terms at zero, and again with them set to read off what
they would be charged for, phase by phase (benchmarks/host/counting.py): kernel ops issued from Python
(`framework_ns`), module calls (`module_call_ns`), autograd nodes (`autograd_node_ns`), optimizer steps,
`zero_grad` parameters, total-norm calls, DataLoader batches. What the model charges with those terms at zero
(dispatch, launch, views, foreach ops: the microbenchmarked part) is the phase's simulated time. Then, with relative errors (noise on these VMs is proportional):

- forward (+ loss): measured - base = framework_ns * kernel ops + module_call_ns * module calls
- backward:         measured - base - framework_ns * kernel ops = autograd_node_ns * nodes
- zero_grad:        measured = zero_grad_ns + zero_grad_per_param_ns * parameters
- optimizer step, clip_grad_norm_: the median over variants of measured - model (a fixed cost)
- DataLoader:       `next()` = its data phase (median); contention = step time with the script's
                    DataLoader (2 workers, pinned memory) minus without it, measured next to each
                    other (once in launch_bound/, three times interleaved in launch_bound/runs/2026-11-22-02/),
                    less `next()` and the batch's copies the model charges anyway

Writes the constants to src/phantora/specs/<gpu>/host.json (benchmarks/common/fitted.py), then prints measured vs
fitted model per variant and phase, and the llama variants of data/h200/host/phases/ (another day, not fitted).
The simulated counts are stored in data/h200/host/launch_bound/host_counts.json (tests/calibration/
test_host_fits.py refits from them); `--simulate` makes them again (CPU only, a few minutes):

    python -m benchmarks.host.fit_context [--simulate] [--specs DIR]
    python -m benchmarks.host.fit_context --leave-one-out   # each variant predicted by a fit on the others
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, data_dir, relative
from benchmarks.host import leases
from benchmarks.host.counting import count_charges

GPU = "h200"
LAUNCH_BOUND = data_dir(GPU, "host", "launch_bound")
MEASURED = LAUNCH_BOUND / "launch_bound.json"
PHASES = data_dir(GPU, "host", "phases", "phases.json")
INTERLEAVED = LAUNCH_BOUND / "runs" / "2026-11-22-02" / "launch_bound_order.json"
"""The DataLoader variants interleaved and repeated on another lease."""
COUNTS = LAUNCH_BOUND / "host_counts.json"
"""What the simulated variants would be charged for, phase by phase (written by --simulate)."""
FITTED = ("framework_ns", "module_call_ns", "autograd_node_ns", "optimizer_step_ns", "zero_grad_ns",
          "zero_grad_per_param_ns", "grad_norm_ns", "dataloader_next_ns", "dataloader_contention_ns")


COUNTED_TERMS = {"kernel_ops": "framework_ns", "module_calls": "module_call_ns", "autograd_nodes": "autograd_node_ns",
                 "optimizer_steps": "optimizer_step_ns", "zero_grad_params": "zero_grad_per_param_ns",
                 "grad_norms": "grad_norm_ns", "batches": "dataloader_next_ns"}
"""What each phase is charged for -> the constant charged per count."""
COUNTING_RUNS = (("autograd_nodes", "module_calls", "optimizer_steps"), ("kernel_ops", "zero_grad_params", "grad_norms"),
                 ("batches",))
"""The counts read off each counting run, the largest first (benchmarks/host/counting.py: below 10^5, 1000, 1000)."""


def simulate(names: list[str]) -> dict[str, dict[str, dict]]:
    """variant -> phase -> {"base_ms", counts...} of one step after one of warm-up, under `phantora run`."""
    return count_charges(names, COUNTED_TERMS, COUNTING_RUNS, warmup=1,
                         zeroed=[t for t in FITTED if t not in COUNTED_TERMS.values()])


def lsq(rows: list[tuple[float, float, list[float]]]) -> np.ndarray:
    """min sum(((base + x.c - y) / y)^2) over c, rows = (y, base, x)."""
    y = np.array([r[0] for r in rows])
    base = np.array([r[1] for r in rows])
    x = np.array([r[2] for r in rows], float)
    c, *_ = np.linalg.lstsq(x / y[:, None], (y - base) / y, rcond=None)
    return c


def fit(measured: dict, sim: dict) -> dict[str, int]:
    names = list(sim)

    def phase(n, p):
        return sim[n].get(p, {"base_ms": 0.0})

    def fwd(n):  # forward and loss together (the llama variants mark the loss apart)
        a, b = phase(n, "fwd"), phase(n, "loss")
        return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}

    meas = {n: measured[n]["phase_ms_median"] for n in names}
    f, m = lsq([(meas[n]["fwd"] + meas[n].get("loss", 0), fwd(n)["base_ms"],
                 [fwd(n)["kernel_ops"], fwd(n)["module_calls"]]) for n in names])
    b = phase
    (node,) = lsq([(meas[n]["bwd"], b(n, "bwd")["base_ms"] + f * b(n, "bwd")["kernel_ops"],
                    [b(n, "bwd")["autograd_nodes"]]) for n in names])
    zero, per_param = lsq([(meas[n]["zero"], 0.0, [1, b(n, "zero")["zero_grad_params"]]) for n in names])
    opt = statistics.median(meas[n]["opt"] - b(n, "opt")["base_ms"] - f * b(n, "opt")["kernel_ops"] for n in names)
    clip = statistics.median(meas[n]["clip"] - b(n, "clip")["base_ms"] - f * b(n, "clip")["kernel_ops"] for n in names)
    # what a DataLoader costs the main thread: step with it - step without it, run next to each other
    # (launch_bound/ ran each once, its interleaved rerun three times), less the copies of the batch the model charges
    pairs = [(measured["nano_noloader"], measured["nano_script"])] + loader_pairs()
    h2d = b("nano_script", "h2d")["base_ms"] + f * b("nano_script", "h2d")["kernel_ops"]
    next_ = statistics.median(with_["phase_ms_median"]["data"] for _, with_ in pairs)
    contention = statistics.median(with_["step_ms_median"] - without["step_ms_median"] - h2d - next_
                                   for without, with_ in pairs)
    ms = {"framework_ns": f, "module_call_ns": m, "autograd_node_ns": node, "optimizer_step_ns": opt,
          "zero_grad_ns": zero, "zero_grad_per_param_ns": per_param, "grad_norm_ns": clip,
          "dataloader_next_ns": next_, "dataloader_contention_ns": contention}
    return {k: int(round(v * 1e6, -2)) for k, v in ms.items()}


def loader_pairs() -> list[tuple[dict, dict]]:
    """(nano_noloader, nano_script) measured one after the other (INTERLEAVED), at the average lease."""
    runs = [at_average_lease(v, leases.lease_of_path(str(INTERLEAVED)))
            for v in json.loads(INTERLEAVED.read_text())["variants"]]
    pairs, last = [], None
    for r in runs:
        if r["name"] == "nano_noloader":
            last = r
        elif r["name"] == "nano_script" and last is not None:
            pairs.append((last, r))
    return pairs


def predict(sim_phases: dict, c: dict) -> dict[str, float]:
    """Phase -> ms under constants `c` (fitted terms only; the rest is in base_ms)."""
    out = {}
    for p, s in sim_phases.items():
        out[p] = s["base_ms"] + 1e-6 * (c["framework_ns"] * s["kernel_ops"] + c["module_call_ns"] * s["module_calls"]
                                        + c["autograd_node_ns"] * s["autograd_nodes"]
                                        + c["optimizer_step_ns"] * s["optimizer_steps"]
                                        + c["zero_grad_ns"] * (s["zero_grad_params"] > 0)
                                        + c["zero_grad_per_param_ns"] * s["zero_grad_params"]
                                        + c["grad_norm_ns"] * s["grad_norms"]
                                        # the contention is paid by the forward's ops; counted with next()
                                        + (c["dataloader_next_ns"] + c["dataloader_contention_ns"]) * s["batches"])
    return out


def host_ms(phases: dict[str, float]) -> float:
    """A step's host time from its phases: all but `sync`, the GPU's tail."""
    return sum(v for p, v in phases.items() if p != "sync")


LOADER_PAIR = "nano_script"
"""The one variant whose DataLoader terms only it informs (its pair with nano_noloader): left out, nothing fits them."""


def leave_one_out(measured: dict, simulated: dict) -> list[tuple[str, float, float | None]]:
    """Per variant: its host time error (%) with the constants fitted on every variant, and with them fitted on the
    others alone (None for LOADER_PAIR)."""
    everything = fit(measured, simulated)
    rows = []
    for name, phases in simulated.items():
        host = host_ms(measured[name]["phase_ms_median"])
        in_sample = 100 * (host_ms(predict(phases, everything)) - host) / host
        if name == LOADER_PAIR:
            rows.append((name, in_sample, None))
            continue
        others = fit(measured, {n: v for n, v in simulated.items() if n != name})
        rows.append((name, in_sample, 100 * (host_ms(predict(phases, others)) - host) / host))
    return rows


def print_leave_one_out(measured: dict, simulated: dict) -> None:
    rows = leave_one_out(measured, simulated)
    print(f"{'variant':24s} {'fitted on all':>14s} {'left out':>9s}   host time error %")
    for name, in_sample, out in rows:
        print(f"{name:24s} {in_sample:+14.1f} " + (f"{out:+9.1f}" if out is not None else
                                                   f"{'n/a':>9s}   (the only DataLoader pair)"))
    both = [(i, o) for _, i, o in rows if o is not None]
    print(f"mean / max |error|: fitted on all {statistics.fmean(abs(i) for i, _ in both):.1f} / "
          f"{max(abs(i) for i, _ in both):.1f} %, each left out {statistics.fmean(abs(o) for _, o in both):.1f} / "
          f"{max(abs(o) for _, o in both):.1f} % ({len(both)} variants)")


def at_average_lease(variant: dict, lease: str) -> dict:
    """A measured variant's times divided by its lease's index (benchmarks/host/leases.py): what the average
    lease would have taken."""
    scale = leases.average_lease_scale(lease)
    scaled = dict(variant)
    for key in ("phase_ms_median", "phase_cpu_ms_median"):
        if key in variant:
            scaled[key] = {phase: ms * scale for phase, ms in variant[key].items()}
    scaled["step_ms"] = [ms * scale for ms in variant["step_ms"]]
    scaled["step_ms_median"] = variant["step_ms_median"] * scale
    return scaled


def load() -> tuple[dict, dict]:
    """(measured variants by name, at the average lease; simulated counts by variant)."""
    lease = leases.lease_of_path(str(MEASURED))
    measured = {v["name"]: at_average_lease(v, lease) for v in json.loads(MEASURED.read_text())["variants"]}
    return measured, json.loads(COUNTS.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true",
                        help=f"simulate the variants again and rewrite {relative(COUNTS)}")
    parser.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    parser.add_argument("--leave-one-out", action="store_true",
                        help="print each variant's host time error with the constants fitted on the others alone; "
                             "write nothing")
    args = parser.parse_args()
    if args.leave_one_out:
        measured, sim = load()
        print_leave_one_out(measured, {n: sim[n] for n in measured})
        return
    if args.simulate or not COUNTS.exists():
        names = [v["name"] for v in json.loads(MEASURED.read_text())["variants"]]
        COUNTS.write_text(json.dumps(simulate(names + ["llama_phases16", "llama_phases8"]), indent=1) + "\n")
    measured, sim = load()
    simulated = {n: sim[n] for n in measured}
    c = fit(measured, simulated)
    source = f"benchmarks/host/fit_context.py on {relative(LAUNCH_BOUND)}"
    print(f"wrote {update_fitted(GPU, 'host', c, dict.fromkeys(c, source), specs_root=args.specs)}:", json.dumps(c))
    print(f"\n{'variant':24s} {'phase':6s} {'measured':>9s} {'model':>8s} {'err %':>6s}")
    for n, phases in simulated.items():
        pred = predict(phases, c)
        meas = measured[n]["phase_ms_median"]
        for p in phases:
            err = 100 * (pred[p] - meas[p]) / meas[p] if meas[p] else float("nan")
            print(f"{n:24s} {p:6s} {meas[p]:9.3f} {pred[p]:8.3f} {err:+6.1f}")
        total, host = host_ms(pred), host_ms(meas)
        print(f"{n:24s} {'HOST':6s} {host:9.3f} {total:8.3f} {100 * (total - host) / host:+6.1f}  "
              f"(whole steps {min(measured[n]['step_ms']):.1f}-{max(measured[n]['step_ms']):.1f} ms)")
    print(f"\n{relative(PHASES)} (another day, not fitted): host-bound llama, phase = ms (each phase ended with a "
          "synchronize)")
    for r, n in zip(json.loads(PHASES.read_text()), ["llama_phases28", "llama_phases16", "llama_phases8"]):
        pred = predict(sim[n], c)
        meas = {k: 1e3 * v for k, v in r["phase_s_median"].items()}
        model = {"fwd": pred["fwd"] + pred["loss"], "bwd": pred["bwd"], "clip": pred["clip"],
                 "opt": pred["opt"] + pred["zero"]}
        print(n, {k: f"{meas[k]:.1f} vs {model[k]:.1f}" for k in model},
              f"total {sum(meas.values()):.1f} vs {sum(model.values()):.1f}")


if __name__ == "__main__":
    main()
