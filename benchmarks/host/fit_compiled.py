"""Fit the host model's cost of running `torch.compile`'d graphs (models/host.py `compiled_call_ns`,
`compiled_input_ns`, `compiled_launch_ns`) to data/h200/host/compiled/.

The measurement (`benchmarks/host/measure_launch_bound.py --compiled`) times the forward and backward phases of
launch-bound compiled models, nanoGPT and Llama at 1, 4 and 12 layers, with Inductor's default mode and with CUDA
graphs (`reduce-overhead`). The same variants run here under `phantora run`, on a copy of Phantora whose host
model has the three terms at zero (the base), then once more with the terms a thousandfold apart
(`benchmarks/host/counting.py`), which reads off what each phase is charged for: compiled graph calls, their
tensor inputs, and the kernels their generated code launches (none under CUDA graphs, whose replay is one launch). Then, with relative errors (noise on
these VMs is proportional), over the forward and backward phases of every variant:

    measured - base = compiled_call_ns * calls + compiled_input_ns * inputs + compiled_launch_ns * launches

The CUDA-graph variants pin the per-call and per-input terms (they launch no kernel from the generated code); the
layer counts separate them from the per-kernel term. The measurement's host ran at the speed its probe before the
measurement says (`lease_probes.jsonl`); the constants are taken to the mean host, as the host model's others are:
times the uncontended hosts' probe over that probe, times the mean contended host's slowdown.

    python -m benchmarks.host.fit_compiled [--simulate] [--dry-run]
"""

from __future__ import annotations

import json

import numpy as np

from benchmarks.common.fitted import fit_parser, write_fit
from benchmarks.common.paths import data_dir, relative
from benchmarks.host.counting import count_charges
from benchmarks.host.fit_context import lsq
from benchmarks.host.fit_python_prices import to_mean_host

DATA = data_dir("h200", "host", "compiled")
MEASURED = DATA / "launch_bound.json"
COUNTS = DATA / "host_counts.json"
"""The simulated variants' base and counts, phase by phase (written by --simulate)."""
TERMS = ("compiled_call_ns", "compiled_input_ns", "compiled_launch_ns")
COUNTED = ("calls", "inputs", "launches")
PHASES = ("fwd", "bwd")
"""The phases that call compiled graphs (the llama variants' loss is computed outside the model: eager)."""
WARMUP = 3
"""Steps before the simulated one: CUDA graph trees warm up on the first call and record on the second."""


def simulate(names: list[str]) -> dict[str, dict[str, dict]]:
    """variant -> phase -> {"base_ms", "calls", "inputs", "launches"}."""
    return count_charges(names, dict(zip(COUNTED, TERMS)), [COUNTED], warmup=WARMUP)


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
    p = fit_parser(__doc__, DATA)
    p.add_argument("--simulate", action="store_true", help=f"simulate the variants again and rewrite {relative(COUNTS)}")
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
