"""Load the raw H200 measurements (data/h200/**/{llama,micro}_ops*.jsonl.gz) as observations.

One observation = one distinct op signature in one setting ("llama_step", "micro_cold",
"micro_hot"): the decoded `OpCall`, the median over repetitions of the op's summed kernel time,
its kernel count and the kernel names. Used by fit_compute_model.py and compute_model_error.py.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from phantora.models.compute import opcall_from_record, signature
from phantora.models.ops import OpCall

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "h200"


@dataclass
class Obs:
    op: OpCall
    kernel_ns: float
    n_kernels: int
    count: int
    origin: str
    kernels: tuple[str, ...]
    cfg: dict | None = None


def _origin(ctx: str) -> str:
    parts = ctx.split("|")
    if len(parts) == 2 and parts[1].startswith("step"):  # "<workload>|step<N>": inside a training step
        return "llama_step"
    return "micro_hot" if ctx.endswith("|hot") else "micro_cold"


def raw_files(exclude: tuple[str, ...] = ()) -> list[Path]:
    """Every raw op file under data/h200, minus those whose name starts with one of `exclude`."""
    return [p for p in sorted(DATA.glob("call*/*_ops*.jsonl.gz")) if not p.name.startswith(exclude)]


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
                op = opcall_from_record(r)
                devices = {t.device for t in op.tensor_inputs()} | {t.device for t in op.outputs}
                if "cuda" not in devices:
                    continue
                ks = r["k"]
                groups[(signature(op), _origin(r["ctx"]))].append(
                    (op, sum(k[2] for k in ks), len(ks), tuple(sorted({names[k[0]] for k in ks})), r.get("cfg")))
    out = []
    for (_, origin), rows in groups.items():
        out.append(Obs(op=rows[0][0], kernel_ns=statistics.median(x[1] for x in rows),
                       n_kernels=int(statistics.median(x[2] for x in rows)), count=len(rows), origin=origin,
                       kernels=rows[0][3], cfg=rows[0][4]))
    return out
