"""Build a GPU's table of cuBLAS kernel choices for the MoE's expert GEMMs and fit what a first launch costs.

Table (models/gemm_kernels.py, Note [First launch of a cuBLAS kernel]): data/<gpu>/kernels/gemm_kernels/ holds
every row count m from 7600 to 8800 through moe_a2a.py's expert FFN, forward and backward, with each `aten.mm`'s
inputs and the kernel it launched (`benchmarks/host/measure_first_launch.py --sweep`). Per family (the inputs with
m free) the kernel is stored as runs over m. With --write it goes to src/phantora/specs/<gpu>/gemm_kernels.json.
Each GPU model has its own table: cuBLAS picks kernels per architecture and SM count.

Fit: data/h200/host/first_launch/ replayed the row counts that each rank's experts got in moe_ep4's timeline
(data/h200/e2e/timelines/runs/2026-11-22-35/moe_ep4), in fresh processes, twice (the second pass has seen every
problem and kernel). A call's first-pass host time less its
second-pass time is regressed on the kernels it launched for the first time in the process (by the table) and
on the GEMM problems it ran for the first time: the costs of a first kernel launch and of a new problem's
algorithm selection. Both leases' probes were uncontended, so the costs are scaled to the mean host by the
contention model's mean factor. With --write, `gemm_kernel_load_ns` goes to src/phantora/specs/<gpu>/host.json
(benchmarks/common/fitted.py); the new problem's cost is printed beside `gemm_select_ns`, which
data/h200/host/moe/ measures directly. The constant is a host cost: a GPU without replays of its own (the H100)
gets its table only, and its host model, with that constant, stays the one its profile borrows.

    python -m benchmarks.kernels.gemm_kernels [--gpu h200] [--write] [--specs DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, data_dir, relative
from phantora.models.gemm_kernels import FORMAT, FREE, GemmKernelTable
from phantora.specs import known_gpus, load_profile

TABLE = "gemm_kernels.json"
"""The table's file in src/phantora/specs/<gpu>/."""
OP = "aten.mm"


def sweep_path(gpu: str) -> Path:
    return data_dir(gpu, "kernels", "gemm_kernels", "sweep.json.gz")


def first_launch_dir(gpu: str) -> Path:
    return data_dir(gpu, "host", "first_launch")


def replays(gpu: str) -> list[Path]:
    """The replays of moe_ep4's row counts, one per rank (none where the GPU has none)."""
    return sorted(first_launch_dir(gpu).glob("replay_lazy_r*.json"))


def gemm_kernel(names: list[str]) -> str:
    """The cuBLAS kernel among what launched inside an mm's range (the profiler's ranges also catch a
    neighbour's elementwise kernels; an mm launches one nvjet kernel here, no split-K reduction)."""
    return next(n for n in names if n.startswith("nvjet"))


def layout(inputs: list, m: int) -> list:
    free = lambda dims: [FREE if d == m else d for d in dims]  # noqa: E731
    return [[free(shape), free(stride), dtype.removeprefix("torch.")] for shape, stride, dtype in inputs]


def build_table(sweep: dict, gpu: str) -> dict:
    families: dict[str, dict[int, str]] = {}
    for call in sweep["gemms"]:
        key = json.dumps(layout(call["inputs"], call["m"]))
        kernel = gemm_kernel(call["kernels"])
        seen = families.setdefault(key, {}).setdefault(call["m"], kernel)
        if seen != kernel:
            raise SystemExit(f"two kernels for one problem: {key} m={call['m']}")
    names = sorted({k for by_m in families.values() for k in by_m.values()})
    index = {n: i for i, n in enumerate(names)}
    out = []
    for key, by_m in sorted(families.items()):
        sizes = sorted(by_m)
        if sizes != list(range(sizes[0], sizes[-1] + 1)):
            raise SystemExit(f"gaps in the sweep of {key}")
        runs = [[m, index[by_m[m]]] for i, m in enumerate(sizes) if i == 0 or by_m[m] != by_m[sizes[i - 1]]]
        out.append({"op": OP, "inputs": json.loads(key), "sizes": [sizes[0], sizes[-1]], "runs": runs})
    return {"format": FORMAT, "version": 1, "gpu": gpu,
            "measured": f"{relative(sweep_path(gpu))}: benchmarks/host/measure_first_launch.py --sweep "
                        f"{sweep['sweep'][0]} {sweep['sweep'][1]} (torch {sweep['torch']}, one {gpu.upper()})",
            "kernels": names, "families": out}


def problems_by_size(sweep: dict) -> dict[tuple[int, str], list[list]]:
    """(m, phase) -> the layouts of the GEMMs one FFN call runs (from the sweep, which ran each m once)."""
    out: dict[tuple[int, str], list[list]] = {}
    for call in sweep["gemms"]:
        inputs = [(tuple(s), tuple(st), d.removeprefix("torch.")) for s, st, d in call["inputs"]]
        out.setdefault((call["m"], call["phase"]), []).append(inputs)
    return out


def replay_rows(table: GemmKernelTable, gemms: dict, replay: dict) -> list[tuple[str, int, int, float]]:
    """(phase, first-launched kernels, new problems, first-pass less second-pass µs) per FFN call; the
    process's first call (CUDA's own start-up) and each step's first backward interval (the loss) left out."""
    first, second = replay["passes"]
    kernels, problems, rows = set(), set(), []

    def new(phase: str, m: int) -> tuple[int, int]:
        runs = gemms[(m, phase)]
        ks, ps = {table.kernel(OP, inputs) for inputs in runs}, {tuple(inputs) for inputs in runs}
        counts = len(ks - kernels), len(ps - problems)
        kernels.update(ks)
        problems.update(ps)
        return counts

    for step, (a, b) in enumerate(zip(first, second)):
        sizes = [m for layer in a["rows"] for m in layer]
        forward = [new("forward", m) for m in sizes]
        backward = {i: new("backward", sizes[i]) for i in reversed(range(len(sizes)))}
        for i in range(len(sizes)):
            if step or i:
                rows.append(("forward", *forward[i], a["forward_us"][i] - b["forward_us"][i]))
            if i != len(sizes) - 1:
                rows.append(("backward", *backward[i], a["backward_us"][i] - b["backward_us"][i]))
    return rows


def fit(rows: list[tuple[str, int, int, float]]) -> tuple[float, float]:
    """Least squares µs per first kernel launch and per new problem."""
    x = np.array([[k, p] for _, k, p, _ in rows], float)
    y = np.array([us for *_, us in rows])
    (per_kernel, per_problem), *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(per_kernel), float(per_problem)


def round_to(ns: float, step: int) -> int:
    """`ns` to a multiple of `step`: the fit's spread over the replays is wider than that."""
    return int(round(ns / step) * step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200", choices=known_gpus(),
                   help="whose sweep (and replays), and whose specs/<gpu>/ is written")
    p.add_argument("--write", action="store_true",
                   help=f"write specs/<gpu>/{TABLE} and, where the GPU has replays, the first-launch constant in "
                        "specs/<gpu>/host.json")
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = p.parse_args()
    if not sweep_path(args.gpu).is_file():
        raise SystemExit(f"no {relative(sweep_path(args.gpu))} (benchmarks/common/run_subject.sh kernels gemm_kernels, "
                         "on that GPU)")
    sweep = json.loads(gzip.decompress(sweep_path(args.gpu).read_bytes()))
    data = build_table(sweep, args.gpu)
    table = GemmKernelTable.from_dict(data)
    gemms = problems_by_size(sweep)
    mismatched = sum(table.kernel(OP, [(tuple(s), tuple(st), d.removeprefix("torch.")) for s, st, d in c["inputs"]])
                     != gemm_kernel(c["kernels"]) for c in sweep["gemms"])
    runs = sum(len(f["runs"]) for f in data["families"])
    print(f"{len(data['families'])} families, {len(data['kernels'])} kernels, {runs} runs over m "
          f"{sweep['sweep'][0]}-{sweep['sweep'][1]}; table lookups that miss the sweep: {mismatched}")
    if args.write:
        out = args.specs / args.gpu / TABLE
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"wrote {out} ({out.stat().st_size} bytes)")
    if not replays(args.gpu):
        print(f"no replays in {relative(first_launch_dir(args.gpu))}: the first-launch cost is not fitted for "
              f"{args.gpu} (its host model's gemm_kernel_load_ns stays)")
        return
    fit_first_launch(args, table, gemms)


def fit_first_launch(args: argparse.Namespace, table: GemmKernelTable, gemms: dict) -> None:
    """The first-launch and new-problem costs from the replays; with --write, `gemm_kernel_load_ns` to host.json."""
    rows = [row for path in replays(args.gpu) for row in replay_rows(table, gemms, json.loads(path.read_text()))]
    profile = load_profile(args.gpu)
    scale = profile.host_contention.value.mean_factor()
    for phase in ("forward", "backward"):
        some = [r for r in rows if r[0] == phase]
        for k in sorted({r[1] for r in some}):
            excess = sorted(r[3] for r in some if r[1] == k)
            print(f"{phase}: calls launching {k} kernel(s) first: {len(excess)}, first-pass excess median "
                  f"{excess[len(excess) // 2]:.0f} µs")
    per_kernel, per_problem = fit(rows)
    print(f"at the mean host (x{scale:.3f}): a first kernel launch {per_kernel * scale:.0f} µs "
          f"(gemm_kernel_load_ns now {profile.host.value.gemm_kernel_load_ns / 1e3:.0f}), a new problem "
          f"{per_problem * scale:.0f} µs (gemm_select_ns {profile.host.value.gemm_select_ns / 1e3:.0f})")
    if args.write:
        source = (f"benchmarks/kernels/gemm_kernels.py on {relative(first_launch_dir(args.gpu))} and "
                  f"{relative(sweep_path(args.gpu))}")
        constants = {"gemm_kernel_load_ns": round_to(per_kernel * scale * 1e3, 100_000)}
        written = update_fitted(args.gpu, "host", constants, dict.fromkeys(constants, source), specs_root=args.specs)
        print(f"wrote {written}")


if __name__ == "__main__":
    main()
