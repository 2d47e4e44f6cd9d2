"""Leave-some-out error of the analytic compute model against the H200 measurements.

    python -m benchmarks.kernels.error [--folds 5] [--gpu h200] [--only gemm | --only layout]

Every distinct measured op signature (data/h200, with the accuracy benchmark's ops converted to
in-step times as fit_compute_model.py uses them) is assigned to one of K folds by a hash of its
signature. For each fold the analytic model is refitted on the other folds
(benchmarks/kernels/fit.py) and predicts the held-out ops; the kernel time it predicts
(without the inter-kernel gap) is compared with the measured one. Prints, per kernel class and
measurement setting: the number of signatures, the median and 90th-percentile absolute relative
error, and the time-weighted error |sum(pred) - sum(meas)| / sum(meas). Then the whole llama
step: measured kernel time vs. the database's and the held-out analytic model's totals.

`--only layout` refits only the term groups of `fit.py --only` (the strided concatenation, index_put_, the norms'
rows and tiles) on the other folds, the rest of the shipped calibration kept, and reports their ops per family, beside
the shipped calibration's error on the same ops (fitted on all of them: in-sample).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import gzip
import json

from benchmarks.kernels.dataset import IN_STEP_GLOB, KERNELS, in_step_observations, load_observations, raw_files
from benchmarks.kernels import dataset
from benchmarks.kernels.fit import (
    TERMS, base_calibration, build_database, fit_calibration, fit_gemm, fit_terms, memory_groups, model_for, use_gpu,
)

from phantora.models.compute import (
    NORM_BACKWARD_OPS, NORM_FORWARD_OPS, Calibration, ComputeModel, KernelDatabase, classify, packet_name,
)
from phantora.specs import get_gpu_spec
from phantora.specs import load_profile
from phantora.models.opcall import decode_op, signature


def fold_of(sig: str, k: int) -> int:
    return int(hashlib.sha256(sig.encode()).hexdigest(), 16) % k


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--gpu", default=dataset.GPU, help="the GPU whose data/<gpu>/kernels/ is fitted and predicted")
    ap.add_argument("--only", choices=["gemm", "layout"], help="refit and report this kernel class (or the layout "
                    "terms' families) alone, no whole steps")
    args = ap.parse_args()
    use_gpu(args.gpu)
    raw = load_observations()
    obs = [o for o in raw + in_step_observations(raw)[0] if o.kernel_ns > 0 and classify(o.op.name) is not None]
    if args.only == "layout":
        layout_error(obs, args.folds)
        return
    if args.only:
        obs = [o for o in obs if classify(o.op.name) == args.only]
    preds: dict[int, float] = {}
    for f in range(args.folds):
        train = [o for o in obs if fold_of(signature(o.op), args.folds) != f]
        if args.only == "gemm":
            cal = base_calibration()
            fit_gemm(cal, train)
        else:
            cal = fit_calibration(train, gap_ns=0.0)
        model = model_for(cal)
        for i, o in enumerate(obs):
            if fold_of(signature(o.op), args.folds) == f:
                preds[i] = model.analytic(o.op).duration_ns
        print(f"fold {f + 1}/{args.folds} done", file=sys.stderr, flush=True)
    rows: dict[tuple[str, str], list] = defaultdict(list)
    for i, o in enumerate(obs):
        cls = classify(o.op.name)
        if cls == "copy" and model_kind(o.op) in ("h2d", "d2h"):
            cls = "transfer"
        setting = {"llama_step": "in-step", "micro_in_step": "bench"}.get(o.origin, "micro")
        rows[(cls, setting)].append((preds[i], o.kernel_ns))
        rows[(cls, "all")].append((preds[i], o.kernel_ns))
    print(f"Held-out ({args.folds}-fold by signature) error of the analytic model vs. {args.gpu} kernel times")
    print(f"{'class':12s} {'setting':8s} {'n':>5s} {'median|err|':>11s} {'p90|err|':>9s} {'time-weighted':>13s}")
    for (cls, setting) in sorted(rows):
        v = rows[(cls, setting)]
        errs = sorted(abs(p / m - 1) for p, m in v)
        tw = abs(sum(p for p, _ in v) / sum(m for _, m in v) - 1)
        print(f"{cls:12s} {setting:8s} {len(v):5d} {100 * statistics.median(errs):10.1f}% "
              f"{100 * errs[int(0.9 * (len(errs) - 1))]:8.1f}% {100 * tw:12.1f}%")
    table_row(rows)
    if args.only:
        return
    # whole training steps
    gpu = get_gpu_spec(args.gpu)
    pred_by_sig = {signature(o.op): preds[i] for i, o in enumerate(obs)}
    full = ComputeModel(gpu, load_profile(gpu.key).kernels.value, load_profile(gpu.key).calibration.value)  # packaged database + calibration (all data)
    print("\nWhole steps (sum over every kernel-launching op of one profiled step; kernel time, no gaps):")
    for path in sorted(KERNELS.glob(IN_STEP_GLOB)):
        step_report(path, "database (all data)", full, None)
        step_report(path, "analytic, held-out folds", full, pred_by_sig)
    # a workload none of whose measurements were used: fit database + calibration without it (raw
    # measurements only: the benchmark's converted ops include this workload's)
    for held in ("l1b",):
        files = raw_files(exclude=(held,))
        rest = load_observations(files)
        cal = fit_calibration(rest)
        db = build_database(rest)
        model = ComputeModel(gpu, db, Calibration.from_dict(cal))
        for path in sorted(KERNELS.glob(f"in_step/*/{held}_ops.jsonl.gz")):
            step_report(path, f"held-out workload, db+fit without {held}", model, None)
            step_report(path, f"held-out workload, analytic only", model, None, analytic=True)


def layout_family(op) -> str | None:
    """The family of an op the layout terms model (fit.py TERMS), else None."""
    p = packet_name(op.name)
    if p in NORM_FORWARD_OPS:
        return "norm forward"
    if p in NORM_BACKWARD_OPS:
        return "norm backward"
    kind = model_kind(op, classify(op.name))
    return kind if kind in ("cat_strided", "index_put", "index_put_accumulate") else None


def layout_error(obs: list, folds: int) -> None:
    """Per family of the layout terms: the held-out error of their refit by fold, and the shipped calibration's."""
    obs = [o for o in obs if layout_family(o.op) is not None]
    shipped = load_profile(dataset.GPU).calibration.value
    gapless = dict(json.loads(json.dumps(shipped.raw)), kernel_gap_ns=0.0)
    preds: dict[int, float] = {}
    for f in range(folds):
        cal = json.loads(json.dumps(gapless))
        fit_terms(cal["memory"], memory_groups([o for o in obs if fold_of(signature(o.op), folds) != f]), TERMS)
        model = ComputeModel(get_gpu_spec(dataset.GPU), KernelDatabase(dataset.GPU), Calibration.from_dict(cal))
        preds.update({i: model.analytic(o.op).duration_ns for i, o in enumerate(obs)
                      if fold_of(signature(o.op), folds) == f})
    in_sample = ComputeModel(get_gpu_spec(dataset.GPU), KernelDatabase(dataset.GPU), Calibration.from_dict(gapless))
    rows: dict[tuple[str, str], list] = defaultdict(list)
    for i, o in enumerate(obs):
        family = layout_family(o.op)
        setting = {"llama_step": "in-step", "micro_in_step": "bench"}.get(o.origin, "micro")
        for key in ((family, setting), (family, "all")):
            rows[key].append((preds[i], o.kernel_ns))
        rows[(f"{family} (shipped)", "all")].append((in_sample.analytic(o.op).duration_ns, o.kernel_ns))
    print(f"Held-out ({folds}-fold by signature) error of the layout terms vs. {dataset.GPU} kernel times; "
          "'(shipped)': the shipped calibration, in-sample")
    table_row(rows)


_KIND_MODEL = None


def table_row(rows: dict[tuple[str, str], list]) -> None:
    """Each class as a row of docs/models/compute.md's "Known error" table: n / median |error| / time-weighted
    |error| for all, in-step, bench and micro."""
    print("\n| class | all | in-step | bench | micro |\n| --- | --- | --- | --- | --- |")
    for cls in sorted({c for c, _ in rows}, key=lambda c: -len(rows[(c, "all")])):
        cells = []
        for setting in ("all", "in-step", "bench", "micro"):
            v = rows.get((cls, setting), [])
            if not v:
                cells.append("")
                continue
            errs = sorted(abs(p / m - 1) for p, m in v)
            tw = abs(sum(p for p, _ in v) / sum(m for _, m in v) - 1)
            cells.append(f"{len(v)} / {100 * statistics.median(errs):.1f} % / {100 * tw:.1f} %")
        print(f"| {cls} | " + " | ".join(cells) + " |")


def model_kind(op, cls: str = "copy") -> str:
    global _KIND_MODEL
    _KIND_MODEL = _KIND_MODEL or ComputeModel(get_gpu_spec(dataset.GPU), KernelDatabase(dataset.GPU),
                                              load_profile(dataset.GPU).calibration.value)
    return _KIND_MODEL._memory_kind(op, cls)


def step_report(path, label, model, pred_by_sig, analytic=False) -> None:
    meas = est = 0.0
    hits = n = 0
    first = None
    with gzip.open(path, "rt") as fh:
        fh.readline()
        for line in fh:
            r = json.loads(line)
            first = first or r["ctx"]
            if r["ctx"] != first or "k" not in r:
                continue
            op = decode_op(r)
            if "cuda" not in {t.device for t in op.tensor_inputs()} | {t.device for t in op.outputs}:
                continue
            k = sum(x[2] for x in r["k"])
            if k == 0:
                continue
            n += 1
            meas += k
            if pred_by_sig is not None:
                est += pred_by_sig.get(signature(op), 0.0)
                continue
            e = model.analytic(op) if analytic else model.estimate(op)
            hits += e.source == "measured"
            nk = len(r["k"]) if e.source == "measured" else _kernels(model, op, e)
            est += e.duration_ns - model.cal.kernel_gap_ns * nk
    print(f"  {first:14s} {label:42s} measured {meas / 1e6:8.2f} ms  estimate {est / 1e6:8.2f} ms "
          f"({100 * (est / meas - 1):+5.1f}%)  db hits {hits}/{n}")


def _kernels(model, op, e) -> int:
    """Kernel count the analytic estimate charged gaps for (to report kernel time alone)."""
    gap = model.cal.kernel_gap_ns
    if gap <= 0:
        return 0
    no_gap = ComputeModel(model.gpu, KernelDatabase(model.gpu.key), Calibration.from_dict({**model.cal.raw, "kernel_gap_ns": 0.0}))
    return round((e.duration_ns - no_gap.analytic(op).duration_ns) / gap)

if __name__ == "__main__":
    main()
