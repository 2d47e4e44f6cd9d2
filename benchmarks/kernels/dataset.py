"""Load the raw kernel measurements (data/<gpu>/kernels/{micro,in_step}/*/*_ops*.jsonl.gz) as observations.

One observation = one distinct op signature in one setting ("llama_step", "micro_cold",
"micro_hot"): the decoded `OpCall`, the median over repetitions of the op's summed kernel time,
its kernel count and the kernel names. Used by fit_compute_model.py and compute_model_error.py.

`in_step_observations` adds the accuracy benchmark's own ops (data/h200/e2e/coverage/ops/, measured by
`phantora profile` with the L2 evicted and warm: data/h200/kernels/micro/coverage_all/), converted to the time they take inside a
training step (Note [Microbenchmark to step]).
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from phantora.models.compute import KernelDatabase, classify
from phantora.models.opcall import decode_op, signature
from phantora.models.ops import OpCall
from phantora.profiler.oplog import read_ops

from benchmarks.common.paths import data_dir

RAW_GLOBS = ("micro/*/*_ops*.jsonl.gz", "in_step/*/*_ops*.jsonl.gz")
"""Microbenchmark sweeps (measure_micro.py) and ops inside real training steps (measure_in_step.py)."""
IN_STEP_GLOB = "in_step/*/*_ops.jsonl.gz"
BENCHMARK_OPS = data_dir("h200", "e2e", "coverage", "ops")
"""The accuracy benchmark's op signatures, simulated once (the ops do not depend on the GPU): the op list that
micro/coverage_all/ measured on every GPU (its meta.json)."""
GPU = "h200"
"""The GPU whose data/<gpu>/kernels/ is read; `use_gpu` picks another (its own measurements, same leaves)."""
KERNELS = BENCHMARK_COLD = BENCHMARK_WARM = Path()
"""data/<GPU>/kernels/ and its `phantora profile` measurements of BENCHMARK_OPS, cold and warm (`use_gpu`)."""


def use_gpu(gpu: str) -> None:
    """Read data/<gpu>/kernels/ from now on."""
    global GPU, KERNELS, BENCHMARK_COLD, BENCHMARK_WARM
    GPU, KERNELS = gpu, data_dir(gpu, "kernels")
    BENCHMARK_COLD = KERNELS / "micro" / "coverage_all" / "all_cold.jsonl"
    BENCHMARK_WARM = KERNELS / "micro" / "coverage_all" / "all_hot.jsonl"


use_gpu(GPU)


SIZE_CLASS_BOUNDS_NS = (20_000, 100_000, 1_000_000)
MIN_PAIRS = 5


@dataclass
class Obs:
    op: OpCall
    kernel_ns: float
    n_kernels: int
    count: int
    origin: str
    kernels: tuple[str, ...]
    cfg: dict | None = None
    kernel_ns_by_name: dict[str, float] | None = None
    """Kernel name -> the median over repetitions of its summed time in the op, where the profiler's kernels were
    recorded one by one (the raw files); None for ops known only by their total (`phantora profile`'s databases).
    The fits of ops that run several kernels of different kinds read their parts from it."""


def _origin(ctx: str) -> str:
    parts = ctx.split("|")
    if len(parts) == 2 and parts[1].startswith("step"):  # "<workload>|step<N>": inside a training step
        return "llama_step"
    return "micro_hot" if ctx.endswith("|hot") else "micro_cold"


def raw_files(exclude: tuple[str, ...] = ()) -> list[Path]:
    """Every raw op file under data/<gpu>/kernels, minus those whose name starts with one of `exclude`."""
    found = sorted(p for pattern in RAW_GLOBS for p in KERNELS.glob(pattern))
    return [p for p in found if not p.name.startswith(exclude)]


def load_observations(files: list[Path] | None = None) -> list[Obs]:
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for path in files or raw_files():
        with gzip.open(path, "rt") as f:
            head = json.loads(f.readline())
            names = head.get("kernel_names", [])
            for line in f:
                r = json.loads(line)
                if "k" not in r:
                    continue  # tag never seen by the profiler
                op = decode_op(r)
                devices = {t.device for t in op.tensor_inputs()} | {t.device for t in op.outputs}
                if "cuda" not in devices:
                    continue
                ks = r["k"]
                by_name: dict[str, float] = defaultdict(float)
                for k in ks:
                    by_name[names[k[0]]] += k[2]
                groups[(signature(op), _origin(r["ctx"]))].append(
                    (op, sum(k[2] for k in ks), len(ks), tuple(sorted(by_name)), r.get("cfg"), by_name))
    out = []
    for (_, origin), rows in groups.items():
        out.append(Obs(op=rows[0][0], kernel_ns=statistics.median(x[1] for x in rows),
                       n_kernels=int(statistics.median(x[2] for x in rows)), count=len(rows), origin=origin,
                       kernels=rows[0][3], cfg=rows[0][4], kernel_ns_by_name=_median_by_name([x[5] for x in rows])))
    return out


def _median_by_name(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per kernel name, the median over the runs of its time (0 in a run that did not launch it)."""
    names = sorted({name for run in runs for name in run})
    return {name: statistics.median(run.get(name, 0.0) for run in runs) for name in names}


# Note [Microbenchmark to step]
# A microbenchmark is not the op inside a training step. With the L2 evicted, a small op pays for
# reading its inputs from HBM that a step's previous op had just left in L2 (+19 % under 20 µs);
# with the L2 warm it is too fast (-14 %); the geometric mean of the two sits at the step's median.
# Large GEMMs run back to back by themselves hold the GPU at its power limit and a lower clock
# (about +12 % at >= 1 ms), while in a step they alternate with memory-bound kernels. The 226 ops
# measured both inside real steps (`llama_step`) and by `phantora profile` (micro/coverage_all) give one factor
# step / sqrt(cold * warm) per kernel group and size class (the median over its pairs; the size
# class's over all groups where a group has fewer than MIN_PAIRS pairs). Ops measured only by the
# microbenchmark are entered at sqrt(cold * warm) times their factor, as origin "micro_in_step".


def size_class(ns: float) -> int:
    return sum(ns >= bound for bound in SIZE_CLASS_BOUNDS_NS)


def kernel_group(op_name: str) -> str:
    cls = classify(op_name)
    return cls if cls in ("gemm", "elementwise", "copy") else "other"


def in_step_factors(step_ns: dict[str, tuple[str, float]], cold: dict[str, float],
                    warm: dict[str, float]) -> dict[tuple[str, int], float]:
    """(group, size class) -> median step / sqrt(cold * warm) over the signatures measured all three ways;
    ("all", size class) for every class."""
    ratios: dict[tuple[str, int], list[float]] = defaultdict(list)
    for sig, (name, ns) in step_ns.items():
        if sig in cold and sig in warm:
            micro = (cold[sig] * warm[sig]) ** 0.5
            for group in (kernel_group(name), "all"):
                ratios[(group, size_class(micro))].append(ns / micro)
    return {key: statistics.median(v) for key, v in ratios.items() if len(v) >= MIN_PAIRS}


def benchmark_ops() -> dict[str, OpCall]:
    """Signature -> op for every op the accuracy benchmark's configurations run."""
    ops: dict[str, OpCall] = {}
    for path in sorted(BENCHMARK_OPS.glob("*.jsonl")):
        for sig, rec in read_ops(path).records.items():
            ops.setdefault(sig, decode_op(rec))
    return ops


def in_step_observations(step_obs: list[Obs]) -> tuple[list[Obs], dict[tuple[str, int], float]]:
    """The benchmark's ops that no training step measured, at their in-step time; and the factors used."""
    cold = KernelDatabase.load(BENCHMARK_COLD).entries
    warm = KernelDatabase.load(BENCHMARK_WARM).entries
    step_ns = {signature(o.op): (o.op.name, o.kernel_ns) for o in step_obs if o.origin == "llama_step"}
    factors = in_step_factors(step_ns, {s: e.kernel_ns for s, e in cold.items()},
                              {s: e.kernel_ns for s, e in warm.items()})
    out = []
    for sig, op in benchmark_ops().items():
        if sig in step_ns or sig not in cold or sig not in warm or cold[sig].kernel_ns <= 0:
            continue
        micro = (cold[sig].kernel_ns * warm[sig].kernel_ns) ** 0.5
        size = size_class(micro)
        factor = factors.get((kernel_group(op.name), size), factors[("all", size)])
        out.append(Obs(op=op, kernel_ns=micro * factor, n_kernels=cold[sig].n_kernels,
                       count=min(cold[sig].count, warm[sig].count), origin="micro_in_step",
                       kernels=cold[sig].kernels))
    return out, factors
