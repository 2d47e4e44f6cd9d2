"""Fit the host model's cost of running `torch.compile`'d graphs (models/host.py `compiled_call_ns`,
`compiled_input_ns`, `compiled_launch_ns`) to data/h200/host/compiled/.

The measurement (`benchmarks/host/measure_launch_bound.py --compiled`) times the forward and backward phases of
launch-bound compiled models, nanoGPT and Llama at 1, 4 and 12 layers, with Inductor's default mode and with CUDA
graphs (`reduce-overhead`). The same variants run here under `phantora run`, on a copy of Phantora whose host
model has the three terms at zero (the base), then once more with the terms a thousandfold apart (`COUNTING_NS`),
which reads off what each phase is charged for: compiled graph calls, their tensor inputs, and the kernels their
generated code launches (none under CUDA graphs, whose replay is one launch). Then, with relative errors (noise on
these VMs is proportional), over the forward and backward phases of every variant:

    measured - base = compiled_call_ns * calls + compiled_input_ns * inputs + compiled_launch_ns * launches

The CUDA-graph variants pin the per-call and per-input terms (they launch no kernel from the generated code); the
layer counts separate them from the per-kernel term. The measurement's host ran at the speed its probe before the
measurement says (`lease_probes.jsonl`); the constants are taken to the mean host, as the host model's others are:
times the uncontended hosts' probe over that probe, times the mean contended host's slowdown.

    python -m benchmarks.host.fit_compiled [--simulate] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common.fitted import write_fit
from benchmarks.common.paths import REPO, SPECS, data_dir, relative
from benchmarks.host.fit_context import lsq
from benchmarks.host.fit_python_prices import to_mean_host

DATA = data_dir("h200", "host", "compiled")
MEASURED = DATA / "launch_bound.json"
COUNTS = DATA / "host_counts.json"
"""The simulated variants' base and counts, phase by phase (written by --simulate)."""
TERMS = ("compiled_call_ns", "compiled_input_ns", "compiled_launch_ns")
COUNTED = ("calls", "inputs", "launches")
COUNTING_NS = (10**13, 10**10, 10**7)
"""The terms' values in the counting run: a phase then takes 10^4 s per call, 10 s per input and 10 ms per launch
more than its base, which keeps the three counts (each below 1000 per phase) apart, and apart from the GPU waits
of the base run (a CUDA graph's recorded memory, a launch queue), which that much host time hides."""
PHASES = ("fwd", "bwd")
"""The phases that call compiled graphs (the llama variants' loss is computed outside the model: eager)."""
WARMUP = 3
"""Steps before the simulated one: CUDA graph trees warm up on the first call and record on the second."""


def simulate_phases(names: list[str], constants: dict[str, int]) -> dict[str, dict[str, float]]:
    """variant -> phase -> simulated ms of one step after WARMUP, with the host model's `constants` changed: run by
    `phantora run` from a copy of the package whose specs/h200/host.json has them."""
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "phantora"
        shutil.copytree(REPO / "src" / "phantora", package, ignore=shutil.ignore_patterns("__pycache__"))
        host = package / "specs" / "h200" / "host.json"
        fitted = json.loads(host.read_text())
        fitted["constants"].update(constants)
        host.write_text(json.dumps(fitted))
        out = Path(tmp) / "phases.json"
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h200", "--out", str(Path(tmp) / "run"),
                   "--host-contention", "h200-vm",
                   "--", "python", "-m", "benchmarks.host.measure_launch_bound", "--only", ",".join(names),
                   "--steps", "1", "--warmup", str(WARMUP), "--no-extras", "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, str(REPO)])}
        subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        return {v["name"]: v["phase_ms_median"] for v in json.loads(out.read_text())["variants"]}


def count(base_ms: float, counting_ms: float) -> dict[str, int]:
    """The three counts from a phase's time in the counting run over its base."""
    unit = COUNTING_NS[-1]
    rest = round((counting_ms - base_ms) * 1e6) + unit // 2  # each count to the nearest
    counts = {}
    for name, ns in zip(COUNTED, COUNTING_NS):
        counts[name], rest = divmod(rest, ns)
    if abs(rest - unit // 2) > unit // 4:
        raise RuntimeError(f"a counting run's phase is not a whole count over its base: {counting_ms} - {base_ms} ms")
    return counts


def simulate(names: list[str]) -> dict[str, dict[str, dict]]:
    """variant -> phase -> {"base_ms", "calls", "inputs", "launches"}."""
    base = simulate_phases(names, dict.fromkeys(TERMS, 0))
    counting = simulate_phases(names, dict(zip(TERMS, COUNTING_NS)))
    return {name: {phase: {"base_ms": phases[phase], "counting_ms": counting[name][phase],
                           **count(phases[phase], counting[name][phase])} for phase in PHASES}
            for name, phases in base.items()}


def rows(measured: dict, sim: dict, scale: float) -> list[tuple[str, str, float, float, list[float]]]:
    """(variant, phase, measured ms at the mean host, simulated base ms, counts) of each compiled phase."""
    out = []
    for name, phases in sim.items():
        for phase in PHASES:
            counts = phases[phase]
            out.append((name, phase, measured[name]["phase_ms_median"][phase] * scale, counts["base_ms"],
                        [counts[k] for k in COUNTED]))
    return out


def fit(table: list) -> dict[str, int]:
    c = lsq([(y, base, x) for _, _, y, base, x in table])
    return {term: int(round(ms * 1e6, -1)) for term, ms in zip(TERMS, c)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--specs", type=Path, default=SPECS, help="write into this copy of src/phantora/specs")
    p.add_argument("--simulate", action="store_true", help=f"simulate the variants again and rewrite {relative(COUNTS)}")
    p.add_argument("--dry-run", action="store_true", help="print, write nothing")
    a = p.parse_args()
    measured = {v["name"]: v for v in json.loads((a.data / MEASURED.name).read_text())["variants"]}
    counts_path = a.data / COUNTS.name
    if a.simulate or not counts_path.exists():
        counts_path.write_text(json.dumps(simulate(list(measured)), indent=1) + "\n")
    sim = json.loads(counts_path.read_text())
    probe_before = json.loads((a.data / "lease_probes.jsonl").read_text().splitlines()[0])["python_loop_us"]
    scale = to_mean_host(probe_before, a.specs)
    table = rows(measured, sim, scale)
    constants = fit(table)
    print(f"at the mean host (measured host {scale:.2f}x faster):", json.dumps(constants))
    print(f"\n{'variant':22s} {'phase':5s} {'calls':>5s} {'inputs':>6s} {'kernels':>7s} {'measured':>9s} {'model':>8s} "
          f"{'base':>8s} {'err %':>6s}")
    c = np.array([constants[t] for t in TERMS]) / 1e6
    for name, phase, y, base, x in table:
        model = base + float(np.dot(c, x))
        print(f"{name:22s} {phase:5s} {x[0]:5d} {x[1]:6d} {x[2]:7d} {y:9.3f} {model:8.3f} {base:8.3f} "
              f"{100 * (model - y) / y:+6.1f}")
    write_fit("benchmarks/host/fit_compiled.py", a.data, "h200", "host", constants, dry_run=a.dry_run,
              specs_root=a.specs)


if __name__ == "__main__":
    main()
