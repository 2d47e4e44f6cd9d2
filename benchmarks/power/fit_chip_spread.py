"""Fit `clock_sigma` (models/chip_variation.py Note [Chip variation]): how much the chips of one machine differ in the
time of their tensor-core (clocked) kernels, and write it to src/phantora/specs/<gpu>/chip_variation.json.

    python -m benchmarks.power.fit_chip_spread [--gpu h200] [--dry-run]

Two kinds of data, each of four GPUs of one machine running the same work at the same time:

- profiled training steps of the fitting set (`data/<gpu>/e2e/step_profiles/`, four-GPU configurations of
  `benchmarks/e2e/split.toml`'s fitting set; one folder per machine lease): each GPU's summed time of the GEMM and
  attention kernels that no NCCL kernel overlapped on any GPU, matched kernel by kernel across the GPUs. A lease's
  configurations ran on the same four chips, so a chip's deviation is its time-weighted mean over them;
- `data/<gpu>/power/chip_spread/` and its `runs/` (benchmarks/power/measure_chip_spread.py, a machine each): GEMMs
  and flash attention back to back at the power limit, each round's median kernel times.

A chip's deviation is its time over its machine's mean, less one; `clock_sigma` is their pooled standard deviation,
sqrt(sum of squares / sum over machines of (GPUs - 1)). The other kernels' spread is printed beside it: it should be
the measurement's noise (memory-bound kernels run at HBM's clock, which does not vary).
"""

from __future__ import annotations

import json
import math
import statistics
import tomllib
from collections import defaultdict
from pathlib import Path

from benchmarks.common.fitted import fit_parser, update_fitted
from benchmarks.common.paths import BENCHMARKS, data_dir, relative
from benchmarks.e2e.compare_step import load_real, overlap_with, union

CLOCKED = ("gemm", "attention")
"""Kernel classes whose time follows the SM clock (models/power.py CLOCKED_CLASSES)."""


def fitting_set(gpu: str) -> set[str]:
    """The fitting set's configurations measured on `gpu` (benchmarks/e2e/split.toml)."""
    split = tomllib.loads((BENCHMARKS / "e2e" / "split.toml").read_text())
    return {c["name"] for c in split["config"] if c["set"] == "fitting" and c["gpu"] == gpu}


def step_spread(config_dir: Path) -> dict[str, list[float]] | None:
    """Each GPU's summed time of the kernels of each class ("clocked", "other") that ran with no NCCL kernel beside
    them on any GPU; None unless the GPUs ran the same kernels in the same order."""
    ranks = [load_real(p) for p in sorted(config_dir.glob("rank*.json.gz"))]
    if len(ranks) < 2:
        return None
    compute, alone = [], []
    for kernels in ranks:
        nccl = union([(start, end) for cls, _, _, start, end in kernels if cls == "nccl"])
        kept = [k for k in kernels if k[0] != "nccl" and not k[1].startswith("Mem")]
        compute.append(kept)
        alone.append([overlap_with([(k[3], k[4])], nccl) == 0.0 for k in kept])
    n = min(map(len, compute))
    if any([k[1] for k in c[:n]] != [k[1] for k in compute[0][:n]] for c in compute):
        return None
    sums = {"clocked": [0.0] * len(ranks), "other": [0.0] * len(ranks)}
    for i in range(n):
        if not all(a[i] for a in alone):
            continue
        kind = "clocked" if compute[0][i][0] in CLOCKED else "other"
        for r, c in enumerate(compute):
            sums[kind][r] += c[i][4] - c[i][3]
    return sums


def deviations(times: list[float]) -> list[float]:
    mean = statistics.fmean(times)
    return [t / mean - 1 for t in times]


def machines_from_steps(gpu: str, configs: set[str]) -> dict[str, dict[str, list[float]]]:
    """Machine lease -> kind -> each chip's time-weighted deviation over the lease's profiled configurations."""
    root = data_dir(gpu, "e2e", "step_profiles")
    leases = {"profiles": root / "profiles", **{p.name: p for p in sorted((root / "runs").iterdir()) if p.is_dir()}}
    machines: dict[str, dict[str, list[float]]] = {}
    for lease, folder in leases.items():
        weighted: dict[str, list[list[float]]] = defaultdict(list)
        for config in sorted(p for p in folder.iterdir() if p.is_dir() and p.name in configs):
            sums = step_spread(config)
            if sums is None or len(sums["clocked"]) != 4:
                continue
            print(f"  {lease}/{config.name}: clocked {statistics.fmean(sums['clocked']) / 1e3:.0f} ms a GPU, "
                  + " ".join(f"{100 * d:+.2f}" for d in deviations(sums["clocked"])) + " %")
            for kind, times in sums.items():
                weighted[kind].append(times)
        if weighted:
            machines[f"steps {lease}"] = {kind: deviations([sum(col) for col in zip(*rows)])
                                          for kind, rows in weighted.items()}
    return machines


def machines_from_microbenchmark(gpu: str) -> dict[str, dict[str, list[float]]]:
    """Machine -> kind -> each chip's deviation in `measure_chip_spread.py`'s runs (the folder's and its reruns'):
    the clocked phase's GEMM and attention, the memory phase's add; the rounds summed."""
    root = data_dir(gpu, "power", "chip_spread")
    runs = [root / "chip_spread.json", *sorted(root.glob("runs/*/chip_spread.json"))]
    machines = {}
    for path in (p for p in runs if p.is_file()):
        gpus = json.loads(path.read_text())["gpus"]
        totals: dict[str, list[float]] = {"clocked": [0.0] * len(gpus), "other": [0.0] * len(gpus)}
        for r, g in enumerate(gpus):
            for entry in g["rounds"]:
                kind = {"clocked": "clocked", "memory": "other"}.get(entry["phase"])
                if kind:
                    totals[kind][r] += sum(entry["ms"].values())
        name = "microbenchmark" + ("" if path.parent == root else f" {path.parent.name}")
        machines[name] = {kind: deviations(t) for kind, t in totals.items()}
    return machines


def pooled_sigma(machines: dict[str, dict[str, list[float]]], kind: str) -> float:
    squares = sum(d * d for m in machines.values() for d in m[kind])
    freedom = sum(len(m[kind]) - 1 for m in machines.values())
    return math.sqrt(squares / freedom)


def main() -> None:
    p = fit_parser(__doc__, data_dir("h200", "power"))
    p.add_argument("--gpu", default="h200")
    a = p.parse_args()
    print("fitting-set steps, clocked kernels per GPU over the machine's mean:")
    machines = machines_from_steps(a.gpu, fitting_set(a.gpu)) | machines_from_microbenchmark(a.gpu)
    for name, kinds in machines.items():
        print(f"{name:30s} clocked " + " ".join(f"{100 * d:+.2f}" for d in kinds["clocked"])
              + " %   other " + " ".join(f"{100 * d:+.2f}" for d in kinds["other"]) + " %")
    sigma = pooled_sigma(machines, "clocked")
    print(f"clock_sigma = {100 * sigma:.2f} % over {sum(len(m['clocked']) for m in machines.values())} chips of "
          f"{len(machines)} machines (other kernels: {100 * pooled_sigma(machines, 'other'):.2f} %)")
    if not a.dry_run:
        source = (f"benchmarks/power/fit_chip_spread.py on {relative(data_dir(a.gpu, 'e2e', 'step_profiles'))} "
                  f"(fitting set) and {relative(data_dir(a.gpu, 'power', 'chip_spread'))}")
        path = update_fitted(a.gpu, "chip_variation", {"clock_sigma": round(sigma, 4)}, {"clock_sigma": source},
                             specs_root=a.specs)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
