"""Fit a GPU's power model (src/phantora/models/power.py) from NVML samples (data/<gpu>/power/nvml/).

    python -m benchmarks.power.fit [--gpu h200] [--step NAME=TRACE.json ...] [--specs DIR]

From `data/<gpu>/power/nvml/duty.json` and `nvml_duty.csv.gz` (one GPU; `gpu_clocks.py duty`):
- `idle_w`: the power between runs (clocks up, nothing running);
- `pj_per_byte`: a bf16 add of two 256 MiB tensors, continuously: power over idle / bytes per second;
- `pj_per_tensor_flop`: 8192^3 bf16 GEMMs, continuously, throttled: power over idle times the GEMM's
  time is its energy; less its bytes' energy, per FLOP.

Then, for each `--step NAME=TRACE` (a Phantora trace.json, simulated on the same GPU, of a configuration in
data/<gpu>/power/nvml/, or the H200's `torchtitan` in its runs/), the power its last simulated step demands (kernel
energies over the step time) against the average power NVML measured over the real steps (STEP_TIMELINES' layer
timeline of NAME, taken with the NVML samples, gives their wall-clock span), and its energy against the real
step's (measured power above the baseline times the measured step). Simulate without the power cap
(`--no-power-cap`) to see what the model is asked for. The first step's gap is the GPU's baseline under load
beyond `idle_w` (temperature, clock tree); that baseline is `PowerCap.idle_w`. The first step is the largest
one-GPU configuration of the fitting set that fits the GPU and whose program is none of its held-out rows:
llama_l3b_1gpu on the H200; on the H100 (80 GB, and llama_l1b_1gpu's program is its held-out llama_l1b_eager_1gpu)
llama_l1b_ac_1gpu.

Writes `pj_per_byte`, `pj_per_tensor_flop` and, with `--step`, `idle_w` (the baseline) to
src/phantora/specs/<gpu>/power.json (benchmarks/common/fitted.py). A GPU's first power.json fitted without `--step`
(fit_all runs it so) takes the baseline of the GPU its profile borrowed the power model from, and its source says so.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import statistics
import sys
from pathlib import Path

from benchmarks.common.fitted import read_fitted, update_fitted
from benchmarks.common.paths import BENCHMARKS, SPECS, data_dir, relative
from benchmarks.e2e.compare_step import last_step_kernels
from benchmarks.power.gpu_clocks import kernel_work
from phantora.models.power import PowerCap
from phantora.specs import known_gpus, load_profile

STEP_TIMELINES = {"h200": data_dir("h200", "e2e", "timelines", "runs", "2026-11-22-18")}
"""The layer timelines taken with a GPU's NVML samples (the same lease), which give their steps' wall-clock span,
where they are not in nvml/steps/timeline/ (where benchmarks/power/measure.sh writes them)."""
TORCHTITAN = data_dir("h200", "power", "nvml", "runs", "2026-11-22-19")
"""The H200's TorchTitan run under NVML, on a later lease (no layer timeline)."""
GEMM_FLOPS, GEMM_BYTES = kernel_work("gemm")
ADD_BYTES = kernel_work("add")[1]


def samples(path: Path, gpu: int = 0) -> list[tuple[float, float]]:
    """(time, instantaneous power W) of one GPU's NVML samples."""
    with gzip.open(path, "rt") as f:
        return [(float(r["t_s"]), float(r["power_w"])) for r in csv.DictReader(f) if int(r["gpu"]) == gpu]


def median_power(power: list[tuple[float, float]], t0: float, t1: float) -> float:
    return statistics.median(p for t, p in power if t0 <= t < t1)


def nvml_dir(gpu: str) -> Path:
    return data_dir(gpu, "power", "nvml")


def step_timelines(gpu: str) -> Path:
    return STEP_TIMELINES.get(gpu) or nvml_dir(gpu) / "steps" / "timeline"


def fit_duty(gpu: str) -> dict[str, float]:
    data = nvml_dir(gpu)
    runs = {r["name"]: r for r in json.loads((data / "duty.json").read_text())["runs"]}
    power = samples(data / "nvml_duty.csv.gz")
    idle = statistics.median(median_power(power, r["wall_start_s"] - 0.6, r["wall_start_s"] - 0.1) for r in runs.values())
    add = runs["add continuous"]
    add_ms = statistics.median(ms for _, k, ms in add["kernels"])
    add_w = median_power(power, add["wall_start_s"] + 0.2, add["wall_end_s"])
    pj_per_byte = (add_w - idle) / (ADD_BYTES / (add_ms * 1e-3)) * 1e12
    gemm = runs["gemm continuous"]
    gemm_ms = statistics.median(ms for t, _, ms in gemm["kernels"] if t - gemm["wall_start_s"] > 0.2)
    gemm_w = median_power(power, gemm["wall_start_s"] + 0.2, gemm["wall_end_s"])
    energy_j = (gemm_w - idle) * gemm_ms * 1e-3
    pj_per_flop = (energy_j - GEMM_BYTES * pj_per_byte * 1e-12) / GEMM_FLOPS * 1e12
    print(f"idle {idle:.0f} W; add {add_ms:.3f} ms at {add_w:.0f} W -> {pj_per_byte:.0f} pJ/byte; "
          f"GEMM 8192^3 {gemm_ms:.3f} ms at {gemm_w:.0f} W -> {energy_j:.3f} J, {pj_per_flop:.3f} pJ/FLOP")
    return {"idle_w": idle, "pj_per_byte": pj_per_byte, "pj_per_tensor_flop": pj_per_flop}


def simulated_step_energy(trace: Path, cap: PowerCap, rank: int = 0) -> tuple[float, float]:
    """(energy J, seconds) of the last whole step of `rank` in a Phantora trace (compare_step.py's step)."""
    kernels = [e for e in last_step_kernels(trace, rank) if "bytes" in e["args"]]
    energy = sum(cap.energy_j(e["cat"], e["args"].get("flops") or 0.0, e["args"]["bytes"] or 0.0) for e in kernels)
    return energy, (max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)) * 1e-6


def step_starts(gpu: str, name: str, rank: int = 0) -> list[float] | None:
    """Wall-clock starts of the real steps of configuration `name` in its layer timeline; None if it has none."""
    timeline = step_timelines(gpu) / name / f"rank{rank}.json"
    return json.loads(timeline.read_text())["wall_start_s"] if timeline.exists() else None


def measured_step_power(gpu: str, name: str, rank: int = 0) -> float:
    """Mean NVML power of GPU `rank` over the real steps after the third (the layer timeline), or, for
    the H200's TorchTitan run (no timeline), over the middle half of the time it drew more than 300 W."""
    starts = step_starts(gpu, name, rank)
    if starts is not None:
        t0, t1 = starts[3], starts[-1]
        power = samples(nvml_dir(gpu) / f"nvml_{name}.csv.gz", rank)
    elif gpu == "h200":
        power = samples(TORCHTITAN / f"nvml_{name}.csv.gz", rank)
        busy = [t for t, p in power if p > 300]
        t0, t1 = busy[0] + 0.3 * (busy[-1] - busy[0]), busy[0] + 0.8 * (busy[-1] - busy[0])
    else:
        raise SystemExit(f"--step {name}: no layer timeline of it in {relative(step_timelines(gpu))}")
    return statistics.fmean(p for t, p in power if t0 <= t < t1)


def measured_step_ms(gpu: str, name: str) -> float:
    """The median step of the configuration's layer timeline after the third; without one (the H200's TorchTitan
    run), its median step in the H200's own runs (benchmarks/e2e/configs.json)."""
    starts = step_starts(gpu, name)
    if starts is not None:
        return statistics.median(b - a for a, b in zip(starts[3:], starts[4:])) * 1e3
    configs = json.loads((BENCHMARKS / "e2e" / "configs.json").read_text())["configs"]
    config = next(c for c in configs if c["name"] == name or c["name"].startswith(name + "_"))
    measured = config.get("measured") or config["remeasured"]
    return measured["step_ms"]["median"]


def borrowed_baseline(gpu: str) -> str | None:
    """The source of the baseline a first power.json of `gpu` takes from the GPU its profile borrows from, where this
    fit gives none (no --step; the file needs one to load); None where the GPU has a power.json of its own."""
    power = load_profile(gpu).power
    if not power.borrowed_from:
        return None
    lent = read_fitted(power.borrowed_from, "power")["sources"]["idle_w"]
    return f"{lent}, borrowed from {power.borrowed_from} (no --step of this GPU yet)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200", choices=known_gpus(),
                   help="whose measurements, and whose specs/<gpu>/power.json is written")
    p.add_argument("--step", action="append", default=[], metavar="NAME=TRACE",
                   help="a Phantora trace.json of configuration NAME of data/<gpu>/power/nvml/ (the baseline's first)")
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = p.parse_args()
    if not (nvml_dir(args.gpu) / "duty.json").is_file():
        raise SystemExit(f"{relative(nvml_dir(args.gpu))}: no duty.json (benchmarks/common/run_subject.sh power nvml, "
                         "on that GPU)")
    fit = fit_duty(args.gpu)
    shipped = load_profile(args.gpu).power.value
    cap = PowerCap(cap_w=shipped.cap_w, idle_w=fit["idle_w"], pj_per_tensor_flop=fit["pj_per_tensor_flop"],
                   pj_per_byte=fit["pj_per_byte"])
    baseline = None
    for item in args.step:
        name, trace = item.split("=", 1)
        energy, seconds = simulated_step_energy(Path(trace), cap)
        demanded = cap.idle_w + energy / seconds
        measured = measured_step_power(args.gpu, name)
        baseline = baseline if baseline is not None else cap.idle_w + measured - demanded
        real_j = (measured - baseline) * measured_step_ms(args.gpu, name) * 1e-3
        print(f"{name}: simulated step {seconds * 1e3:.1f} ms, {energy:.1f} J -> {demanded:.0f} W at idle "
              f"{cap.idle_w:.0f} W, {demanded - cap.idle_w + baseline:.0f} W at the fitted baseline; measured "
              f"{measured:.0f} W, so {real_j:.0f} J per real step above the baseline")
    constants = {"pj_per_tensor_flop": round(fit["pj_per_tensor_flop"], 3), "pj_per_byte": round(fit["pj_per_byte"])}
    if baseline is not None:
        print(f"baseline under load (idle_w): {baseline:.0f} W")
        constants["idle_w"] = float(round(baseline))
    print(f"shipped: {shipped}")
    source = f"benchmarks/power/fit.py on {relative(nvml_dir(args.gpu))}"
    sources = dict.fromkeys(constants, source)
    if baseline is not None:
        sources["idle_w"] = f"{source} and a simulated step of {args.step[0].split('=', 1)[0]} (--step)"
    if "idle_w" not in constants and (lent := borrowed_baseline(args.gpu)):
        constants["idle_w"], sources["idle_w"] = shipped.idle_w, lent
    written = update_fitted(args.gpu, "power", constants, sources, specs_root=args.specs)
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
