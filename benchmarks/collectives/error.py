"""Network model vs measured NCCL collective times of one GPU model (predicted, measured, error per op and size).

    python -m benchmarks.collectives.error [--gpu h200] [--min-bytes 1048576] [--all]

Reference (`reference_dir`): a GPU's nccl_<world>.jsonl files, rows {"op", "world", "bytes", "seconds"},
NCCL_NVLS_ENABLE=0: data/<gpu>/collectives/nccl_isolated/ (measure_nccl.py, each call alone, as the network model
predicts one), but for the H200 data/h200/collectives/nccl/ (2 and 4 H200 SXM of one NVSwitch node, NV18 all pairs,
NCCL 2.28.9). `bytes` follows
nccl-tests' convention, the same as the model's `size_bytes` (nccl.SIZE_CONVENTION): all_gather's is the
gathered output, reduce_scatter's the full input, all_to_all's each rank's whole input; the busbw
column (nccl-tests formulas) shows it: with the other readings all_gather on 2 GPUs would exceed
NVLink's 450 GB/s per direction. "sendrecv" is both ranks sending `bytes` to each other at once.

Every prediction runs through the NetworkSimulator (one collective alone on the network).
Summary lines give mean and max |error| over sizes >= --min-bytes (default 1 MiB), and separately over
the "GPU-bound" points whose measured time is at least 1.5x the small-message floor of their series
(the median over sizes <= 256 KiB): below that the measurement is dominated by a per-call floor
(see docs/network-model.md, "Calibration").
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.paths import data_dir
from phantora.models.network import (
    CollectiveRequest,
    NcclModel,
    NcclTuning,
    NetworkSimulator,
    Topology,
)
from phantora.specs import known_gpus
from phantora.specs.cluster import cluster_from_flags

REFERENCE = {"h200": data_dir("h200", "collectives", "nccl")}
"""The measurements a GPU's NCCL constants are fitted on and checked against, where they are not its nccl_isolated/:
the H200's reference set was taken before measure_nccl.py existed (its nccl_isolated/ checks how it was timed)."""
FLOOR_MAX_BYTES = 256 * 1024
GPU_BOUND_FACTOR = 1.5
LARGE_BYTES = 64 << 20

_BUS_FACTOR = {  # nccl-tests: busbw = algbw x factor(n)
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


@dataclass(frozen=True, slots=True)
class Row:
    op: str
    world: int
    size_bytes: int
    measured_s: float


def reference_dir(gpu: str) -> Path:
    """The folder of `gpu`'s reference measurements."""
    return REFERENCE.get(gpu) or data_dir(gpu, "collectives", "nccl_isolated")


def load_rows(gpu: str) -> list[Row]:
    """Every row of `gpu`'s nccl_<world>.jsonl files, worlds ascending."""
    files = sorted(reference_dir(gpu).glob("nccl_*.jsonl"), key=lambda f: int(f.stem.removeprefix("nccl_")))
    if not files:
        what = reference_dir(gpu).name
        raise SystemExit(f"data/{gpu}/collectives/{what}: no nccl_<world>.jsonl (benchmarks/common/run_subject.sh "
                         f"collectives {what}, on that GPU)")
    rows = []
    for f in files:
        for line in Path(f).read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                rows.append(Row(d["op"], int(d["world"]), int(d["bytes"]), float(d["seconds"])))
    return rows


def series_floors(rows: list[Row]) -> dict[tuple[str, int], float]:
    out = {}
    for key in sorted({(r.op, r.world) for r in rows}):
        small = [r.measured_s for r in rows if (r.op, r.world) == key and r.size_bytes <= FLOOR_MAX_BYTES]
        out[key] = statistics.median(small) if small else 0.0
    return out


def predict_s(row: Row, gpu: str, tuning: NcclTuning | None = None) -> tuple[float, str]:
    """Simulated time of one reference row on a single node of `gpu` with `row.world` GPUs (its shipped NCCL
    constants unless `tuning` is given)."""
    topo = Topology(cluster_from_flags(gpu=gpu, nodes=1, gpus_per_node=row.world))
    net = NetworkSimulator(topo, NcclModel(topo, tuning))
    group = tuple(range(row.world))
    if row.op == "sendrecv":
        for src in group:
            net.submit_p2p(src=src, dst=(src + 1) % row.world, size_bytes=row.size_bytes, start_ns=0, key=src)
    else:
        net.submit(CollectiveRequest(row.op, group, row.size_bytes, 0, row.op,
                                     root=0 if row.op == "broadcast" else None))
    done = net.run_until_idle()
    return max(c.end_ns for c in done) / 1e9, f"{done[0].algorithm}/{done[0].protocol}"


def _fmt_size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200", choices=known_gpus(), help="whose measurements")
    ap.add_argument("--min-bytes", type=int, default=1 << 20, help="smallest size counted in the summary")
    ap.add_argument("--all", action="store_true", help="also print rows below --min-bytes")
    args = ap.parse_args()
    rows = load_rows(args.gpu)
    floors = series_floors(rows)
    print(f"{'op':<15}{'n':>2} {'size':>9} {'measured us':>12} {'predicted us':>13} {'error':>8}  "
          f"{'busbw GB/s':>10}  choice")
    errors: dict[tuple[str, int], list[float]] = {}
    bound: list[float] = []
    large: list[float] = []
    for r in rows:
        if r.size_bytes < args.min_bytes and not args.all:
            continue
        pred, choice = predict_s(r, args.gpu)
        err = (pred - r.measured_s) / r.measured_s * 100
        busbw = r.size_bytes / r.measured_s * _BUS_FACTOR[r.op](r.world) / 1e9
        gpu_bound = r.measured_s >= GPU_BOUND_FACTOR * floors[(r.op, r.world)]
        mark = "" if gpu_bound else "  (floor-bound)"
        print(f"{r.op:<15}{r.world:>2} {_fmt_size(r.size_bytes):>9} {r.measured_s * 1e6:>12.1f} "
              f"{pred * 1e6:>13.1f} {err:>+7.1f}%  {busbw:>10.1f}  {choice}{mark}")
        if r.size_bytes >= args.min_bytes:
            errors.setdefault((r.op, r.world), []).append(abs(err))
            if gpu_bound:
                bound.append(abs(err))
            if r.size_bytes >= LARGE_BYTES:
                large.append(abs(err))
    print()
    print(f"per op and world, sizes >= {_fmt_size(args.min_bytes)}: mean |error| / max |error|")
    for (op, world), errs in sorted(errors.items()):
        print(f"  {op:<15} n={world}: {statistics.mean(errs):5.1f}% / {max(errs):5.1f}%   "
              f"(floor {floors[(op, world)] * 1e6:.0f} us)")
    allerr = [e for v in errors.values() for e in v]
    print(f"ALL   sizes >= {_fmt_size(args.min_bytes)} ({len(allerr)} points): "
          f"mean |error| {statistics.mean(allerr):.1f}%, max {max(allerr):.1f}%")
    if large:
        print(f"LARGE sizes >= {_fmt_size(LARGE_BYTES)} ({len(large)} points): "
              f"mean |error| {statistics.mean(large):.1f}%, max {max(large):.1f}%")
    if bound:
        print(f"GPU-BOUND points (measured >= {GPU_BOUND_FACTOR}x series floor, {len(bound)} points): "
              f"mean |error| {statistics.mean(bound):.1f}%, max {max(bound):.1f}%")


if __name__ == "__main__":
    main()
