"""Fit the network model's few free NCCL constants to one GPU model's collective measurements.

    python -m benchmarks.collectives.fit [--gpu h200] [--points all|gpu-bound] [--specs DIR]

Fitted (everything else is NCCL's own tuning table or a datasheet value, see config.py):
  launch_overhead_us      fixed cost of every collective (launch, proxy, first-chunk sync)
  simple_extra_us         Simple protocol's latency beyond NCCL's baseLat (chunk pipeline fill)
  nvlink_efficiency       fraction of the 450 GB/s NVLink bandwidth a Simple kernel reaches
  ll128_factor            LL128 bandwidth relative to Simple
  all_to_all_efficiency   extra factor for all_to_all
  local_copy_gbytes_per_s rate of the own-chunk copy/reduce in ring kernels (S/n bytes, serial)
  nvlink_step_scale       multiplier on NCCL's per-step NVLink latencies (hwLat NVLINK Ring)

Data: the GPU's reference measurements (benchmarks/collectives/error.py's `reference_dir`); the H200's cover 2 and
4 GPUs, the H100's 2. Where they cover one world size, every ring has the same few steps, so the per-step NVLink
latency cannot be told from the base latency (the H200's 2-GPU nccl_isolated/ alone drives it to the grid's 0, its
2 and 4 GPUs to 1.1x NCCL's): the fit then holds nvlink_step_scale at its start value, and writes it only where the
GPU has no nccl.json yet, as the borrowed GPU's value with its source.
Objective: mean squared relative error of the simulated time (benchmarks/collectives/error.py's
`predict_s`, i.e. the real simulator) over all sizes >= 1 MiB (the benchmark's target); with
`--points gpu-bound` only over points whose measured time is >= 1.5x the small-message floor of their
series (the fit then ignores points where the measurement shows a per-call floor; it lands on nearly
the same constants). Method: deterministic coordinate descent over fixed grids, from the
GPU's shipped values, until no coordinate improves. Writes the fitted NcclTuning fields to
src/phantora/specs/<gpu>/nccl.json (benchmarks/common/fitted.py).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from benchmarks.collectives.error import GPU_BOUND_FACTOR, Row, load_rows, predict_s, reference_dir, series_floors
from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, relative
from phantora.models.network.config import NcclTuning, PerProtocol
from phantora.specs import Part, known_gpus, load_profile

NCCL_SIMPLE_BASE_US = 8.4  # NCCL tuning.cc baseLat Ring/Tree Simple
NCCL_NVLINK_STEP_US = PerProtocol(ll=0.6, ll128=1.9, simple=3.4)  # NCCL tuning.cc hwLat NVLINK Ring

FITTED = ("launch_overhead_ns", "ring_base_latency_ns", "tree_base_latency_ns", "nvlink_step_latency_ns",
          "protocol_bandwidth_factor", "nvlink_efficiency", "all_to_all_efficiency", "local_copy_bytes_per_s")
"""The NcclTuning fields the grids below move (PerProtocol fields whole: NCCL's table for the other protocols)."""

GRIDS: dict[str, np.ndarray] = {
    "launch_overhead_us": np.arange(0.0, 60.0, 1.0),
    "simple_extra_us": np.arange(0.0, 80.0, 1.0),
    "nvlink_efficiency": np.round(np.arange(0.60, 1.0001, 0.005), 3),
    "ll128_factor": np.round(np.arange(0.50, 1.0001, 0.01), 2),
    "all_to_all_efficiency": np.round(np.arange(0.60, 1.0001, 0.01), 2),
    "nvlink_step_scale": np.round(np.arange(0.0, 4.01, 0.05), 2),
    "local_copy_gbytes_per_s": np.array([200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1500, 2000, 3000, 1e6]),
}


HELD_FIELD = {"nvlink_step_scale": "nvlink_step_latency_ns"}
"""The grid coordinate that one world size cannot identify, and the NcclTuning field it sets."""


def held_coordinates(rows: list[Row]) -> set[str]:
    """The coordinates the points cannot identify: the per-step latency where every point has one world size."""
    return set(HELD_FIELD) if len({r.world for r in rows}) == 1 else set()


def written_sources(gpu: str, shipped: Part[NcclTuning], held: set[str]) -> dict[str, str]:
    """The source of every field the fit writes: the fitted ones, and a held one only where the GPU has no nccl.json
    yet (it then comes from the GPU its profile borrows from, and says so); a held field of its own file stays."""
    data = relative(reference_dir(gpu))
    held_fields = {HELD_FIELD[c] for c in held}
    sources = {name: f"benchmarks/collectives/fit.py on {data}" for name in FITTED if name not in held_fields}
    if shipped.borrowed_from:
        sources |= {name: f"{shipped.value.sources[name]}, borrowed from {shipped.borrowed_from} ({data} has one world "
                          "size)" for name in held_fields}
    return sources


def params_of(t: NcclTuning) -> dict[str, float]:
    return {
        "launch_overhead_us": t.launch_overhead_ns / 1000,
        "simple_extra_us": t.ring_base_latency_ns.simple / 1000 - NCCL_SIMPLE_BASE_US,
        "nvlink_efficiency": t.nvlink_efficiency,
        "ll128_factor": t.protocol_bandwidth_factor.ll128,
        "all_to_all_efficiency": t.all_to_all_efficiency,
        "local_copy_gbytes_per_s": t.local_copy_bytes_per_s / 1e9,
        "nvlink_step_scale": t.nvlink_step_latency_ns.simple / 1000 / NCCL_NVLINK_STEP_US.simple,
    }


def tuning_of(p: dict[str, float], base: NcclTuning) -> NcclTuning:
    """`base` with the fitted fields set from the grid coordinates `p`."""
    simple_base_ns = int(round((NCCL_SIMPLE_BASE_US + p["simple_extra_us"]) * 1000))
    return replace(
        base,
        launch_overhead_ns=int(round(p["launch_overhead_us"] * 1000)),
        ring_base_latency_ns=replace(base.ring_base_latency_ns, simple=simple_base_ns),
        tree_base_latency_ns=replace(base.tree_base_latency_ns, simple=simple_base_ns),
        nvlink_efficiency=float(p["nvlink_efficiency"]),
        protocol_bandwidth_factor=replace(base.protocol_bandwidth_factor, ll128=float(p["ll128_factor"])),
        all_to_all_efficiency=float(p["all_to_all_efficiency"]),
        local_copy_bytes_per_s=float(p["local_copy_gbytes_per_s"]) * 1e9,
        nvlink_step_latency_ns=PerProtocol(
            **{f: int(round(NCCL_NVLINK_STEP_US.get(proto) * p["nvlink_step_scale"] * 1000))
               for f, proto in (("ll", "LL"), ("ll128", "LL128"), ("simple", "Simple"))}),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200", choices=known_gpus(),
                    help="whose measurements, and whose specs/<gpu>/nccl.json is written")
    ap.add_argument("--points", choices=("all", "gpu-bound"), default="all")
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = ap.parse_args()
    rows = load_rows(args.gpu)
    shipped = load_profile(args.gpu).nccl
    start = shipped.value
    floors = series_floors(rows)
    pts = [r for r in rows if r.size_bytes >= args.min_bytes
           and (args.points == "all" or r.measured_s >= GPU_BOUND_FACTOR * floors[(r.op, r.world)])]
    measured = np.array([r.measured_s for r in pts])
    held = held_coordinates(pts)

    def objective(p: dict[str, float]) -> float:
        t = tuning_of(p, start)
        pred = np.array([predict_s(r, args.gpu, t)[0] for r in pts])
        return float(np.mean(((pred - measured) / measured) ** 2))

    p = params_of(start)
    best = objective(p)
    print(f"fitting {len(pts)} points ({args.points}, sizes >= {args.min_bytes} B); start rms {best ** 0.5:.4f}"
          + (f"; held at the start ({shipped.source}): {', '.join(sorted(held))}, one world size" if held else ""))
    improved = True
    rounds = 0
    while improved and rounds < 20:
        improved = False
        rounds += 1
        for name, grid in GRIDS.items():
            if name in held:
                continue
            for v in grid.tolist():
                q = {**p, name: v}
                obj = objective(q)
                if obj < best - 1e-12:
                    best, p, improved = obj, q, True
        print(f"round {rounds}: rms relative error {best ** 0.5:.4f}  " + "  ".join(f"{k}={v:.4g}" for k, v in p.items()))
    t = tuning_of(p, start)
    nvlink_gbytes_per_s = load_profile(args.gpu).node.nvlink_bandwidth_bytes_per_s / 1e9
    print(f"effective Simple NVLink bandwidth: {nvlink_gbytes_per_s * t.nvlink_efficiency:.0f} GB/s per direction")
    sources = written_sources(args.gpu, shipped, held)
    constants = {name: value for name, value in asdict(t).items() if name in sources}
    written = update_fitted(args.gpu, "nccl", constants, sources, specs_root=args.specs)
    print(f"wrote {written}")


if __name__ == "__main__":
    main()
