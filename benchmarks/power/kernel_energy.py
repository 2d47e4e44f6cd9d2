"""Energy per kernel at full clock and held down by the power limit, from the board's energy counter.

    python -m benchmarks.power.kernel_energy [--gpu h200]

Reads `data/<gpu>/power/energy/<board>/energy.json` (`gpu_clocks.py energy`: one kernel at a time, at two duty cycles
short of the limit and continuously, the idle board first). For each board and kernel it prints the kernel's time
and energy above the idle board at full clock (the runs at its fastest time: their average power above idle over
kernels per second), its time and energy continuously, where the limit holds the clock down (stretch s = that time
over the full-clock one), the exponent ln(E_full / E_s) / ln s of the energy's fall with the clock, the energy per
FLOP (less the bytes' at the add's energy per byte) or per byte, and the steady stretch the shipped power model
(specs/<gpu>/power.json) gives that kernel run continuously. docs/models/power.md (Known error) reads it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from benchmarks.common.paths import data_dir, relative
from benchmarks.power.gpu_clocks import kernel_work
from phantora.models.power import GpuPower, PowerCap
from phantora.specs import known_gpus, load_profile

MEMORY_BOUND = ("add", "swiglu", "rmsnorm")
"""Kernels the limit does not slow: their continuous runs are at full clock too."""
FULL_CLOCK_SLACK = 1.02


def rows(path: Path, cap: PowerCap) -> tuple[float, list[dict]]:
    runs = json.loads(path.read_text())["runs"]
    idle_run = next(r for r in runs if r["kernel"] is None)
    idle = idle_run["mj"] / 1e3 / idle_run["seconds"]
    by_kernel: dict[str, list[dict]] = {}
    for r in runs:
        if r["kernel"] is not None:
            by_kernel.setdefault(r["kernel"], []).append(r)

    def energy(r: dict) -> float:
        return (r["mj"] / 1e3 / r["seconds"] - idle) / (len(r["kernels"]) / r["seconds"])

    add = by_kernel["add"]
    pj_per_byte = statistics.fmean(energy(r) for r in add) / kernel_work("add")[1] * 1e12
    table = []
    for kernel, kruns in by_kernel.items():
        fastest = min(statistics.median(r["kernels"]) for r in kruns)
        full = [r for r in kruns if statistics.median(r["kernels"]) <= FULL_CLOCK_SLACK * fastest
                and (r["idle_ms"] or kernel in MEMORY_BOUND)]
        held = next(r for r in kruns if r["idle_ms"] == 0)
        e_full, e_held = statistics.fmean(energy(r) for r in full), energy(held)
        stretch = statistics.median(held["kernels"]) / fastest
        row = {"kernel": kernel, "ms": fastest, "j": e_full, "held_stretch": stretch, "held_j": e_held,
               "held_mhz": held["sm_mhz_at_end"], "exponent": None, "per_unit": None, "shipped_stretch": None}
        if stretch > FULL_CLOCK_SLACK:
            row["exponent"] = math.log(e_full / e_held) / math.log(stretch)
        flops, nbytes = kernel_work(kernel)
        row["per_unit"] = (e_full - nbytes * pj_per_byte * 1e-12) / flops * 1e12 if flops else e_full / nbytes * 1e12
        if kernel in ("gemm", "mlp8b", "attention"):
            row["shipped_stretch"] = steady_stretch(cap, "attention" if kernel == "attention" else "gemm", flops,
                                                    nbytes, fastest)
        table.append(row)
    return idle, table


def steady_stretch(cap: PowerCap, kernel_class: str, flops: float, nbytes: float, full_ms: float) -> float:
    """The stretch the power model settles at for one kernel run back to back (three of its windows)."""
    gpu, t_ns, full_ns, duration = GpuPower(cap), 0, round(full_ms * 1e6), 0
    while t_ns < 3 * cap.window_s * 1e9:
        duration = gpu.place(t_ns, kernel_class, flops, nbytes, full_ns)
        t_ns += duration
    return duration / full_ns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200", choices=known_gpus())
    args = p.parse_args()
    boards = sorted(data_dir(args.gpu, "power", "energy").glob("*/energy.json"))
    if not boards:
        raise SystemExit(f"no energy runs under {relative(data_dir(args.gpu, 'power', 'energy'))} "
                         "(benchmarks/power/gpu_clocks.py energy, on that GPU)")
    cap = load_profile(args.gpu).power.value
    for path in boards:
        idle, table = rows(path, cap)
        print(f"{relative(path)}: idle {idle:.1f} W")
        print(f"  {'kernel':14s} {'full ms':>8s} {'J':>7s} {'held s':>7s} {'MHz':>5s} {'J':>7s} {'exp':>5s} "
              f"{'pJ/FLOP|B':>9s} {'shipped s':>9s}")
        for r in table:
            exponent = f"{r['exponent']:.2f}" if r["exponent"] is not None else "-"
            shipped = f"{r['shipped_stretch']:.3f}" if r["shipped_stretch"] is not None else "-"
            print(f"  {r['kernel']:14s} {r['ms']:8.3f} {r['j']:7.3f} {r['held_stretch']:7.3f} {r['held_mhz']:5d} "
                  f"{r['held_j']:7.3f} {exponent:>5s} {r['per_unit']:9.3f} {shipped:>9s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
