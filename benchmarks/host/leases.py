"""How fast each lease of the H200 machines ran host-bound work, against the average lease measured.

A host-bound step's real time depends on the lease: the same command's run medians differ by up to 1.6x between
leases of one machine type (data/h200/host/leases/README.md), far beyond the host-speed probe's power to tell (two
one-GPU leases with uncontended probes ran llama_tiny at 21.0 and at 13-16 ms). Each configuration's ground truth
pools whichever leases it happened to run on, and each host-model constant was fitted on one or a few leases.
Every ground-truth run names its lease (`runs[].run` in benchmarks/e2e/configs.json: `2026-11-22-24/g1` is run g1
of the 24th lease of 2026-11-22), and most leases ran several of the host-bound configurations, so lease and
configuration can be told apart. By least squares on the log of each run's median:

    log(run median) = configuration term + lease effect,   lease effects summing to zero

The lease index, exp(lease effect), is how much slower than the average lease that lease ran the same commands.
It compares runs of one configuration with each other, so it needs no model. The host model's fits divide what
they measured on a lease by its index: the constants then stand for the average lease, not for the leases that
happened to be measured (docs/models/host.md).

With predictions (benchmarks/e2e/accuracy.py --json), the configuration term less the prediction is the model's error
against the average lease; also printed with each lease left out in turn.

    python -m benchmarks.host.leases                    # lease indices
    python -m benchmarks.host.leases --rows ROWS.json   # and the model's error per configuration
    python -m benchmarks.host.leases --write            # freeze them in data/h200/host/leases/lease_index.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
from pathlib import Path

import numpy as np

from benchmarks.common.paths import BENCHMARKS, REPO, data_dir

GPU = "h200"
CONFIGS = BENCHMARKS / "e2e" / "configs.json"
DATA = data_dir(GPU, "host").parent
INDEX = data_dir(GPU, "host", "leases", "lease_index.json")
LEASE = re.compile(r"\d{4}-\d\d-\d\d-\d\d")
"""A lease: `<date>-<NN>`, the NNth machine lease of that day (data/README.md)."""
HOST_BOUND = ("llama_tiny_1gpu", "nanogpt_tiny_1gpu", "llama_l1b_tp2", "llama_l1b_tp4", "llama_l1b_fsdp2_tp2",
              "moe_ep4", "llama_l1b_fsdp4_ga4")
"""The configurations whose step is mostly host time; the others' runs differ between leases by a few %."""
FIRST_TIMELINES = {"llama_l1b_tp2": "2026-11-22-04", "llama_l1b_tp2_run2": "2026-11-22-05",
                   "llama_l1b_tp4": "2026-11-22-05", "llama_l1b_fsdp2_tp2": "2026-11-22-05"}
"""data/h200/e2e/timelines/ (outside runs/) holds three leases' runs; which lease took which (its meta.json)."""

Observation = tuple[str, str, float]
"""(configuration, lease, log of a run's median ms)."""


def lease_of(run: str) -> str:
    """The lease a run names (`2026-11-22-05/r1tp4` -> `2026-11-22-05`)."""
    lease = run.split("/")[0]
    if not LEASE.fullmatch(lease):
        raise ValueError(f"run {run!r} names no lease (<date>-<NN>)")
    return lease


def lease_of_path(path: str) -> str | None:
    """The lease a file under data/h200/ was measured on (`.../runs/2026-11-22-24/...` -> `2026-11-22-24`), None if
    unknown."""
    parts = Path(os.path.relpath(path, DATA)).parts
    for folder, lease in zip(parts, parts[1:]):
        if folder == "runs" and LEASE.fullmatch(lease):
            return lease
    if parts[:2] == ("e2e", "timelines") and len(parts) > 2:
        return FIRST_TIMELINES.get(parts[2])
    return lease_of_leaf(Path(path))


def lease_of_leaf(path: Path) -> str | None:
    """The one lease the meta.json of the measurement holding `path` names, None if it names several or none."""
    for folder in (path, *path.parents):
        if folder == DATA or DATA not in folder.parents:
            return None
        meta = folder / "meta.json"
        if meta.exists():
            lease = json.loads(meta.read_text()).get("lease")
            return lease if isinstance(lease, str) and LEASE.fullmatch(lease) else None
    return None


def observations(configs: list[dict], rows: tuple[str, ...] = HOST_BOUND) -> list[Observation]:
    """Every ground-truth run of the given configurations."""
    return [(c["name"], lease_of(run["run"]), math.log(run["median_ms"]))
            for c in configs if c["name"] in rows for run in c["measured"]["runs"]]


def fit(obs: list[Observation]) -> tuple[dict[str, float], dict[str, float], float]:
    """Configuration terms and lease effects (logs), and the residuals' standard deviation."""
    rows = sorted({o[0] for o in obs})
    leases = sorted({o[1] for o in obs})
    a = np.zeros((len(obs) + 1, len(rows) + len(leases)))
    y = np.zeros(len(obs) + 1)
    for i, (row, lease, value) in enumerate(obs):
        a[i, rows.index(row)] = 1
        a[i, len(rows) + leases.index(lease)] = 1
        y[i] = value
    a[-1, len(rows):] = 1  # the lease effects sum to zero: configuration terms are the average lease's
    solution, *_ = np.linalg.lstsq(a, y, rcond=None)
    residuals = y[:-1] - a[:-1] @ solution
    return (dict(zip(rows, solution[:len(rows)])), dict(zip(leases, solution[len(rows):])),
            float(residuals.std()))


@functools.cache
def lease_index() -> dict[str, float]:
    """The frozen lease indices (data/h200/host/leases/lease_index.json): the fits' divisor for each lease."""
    return json.loads(INDEX.read_text())["index"]


def average_lease_scale(lease: str) -> float:
    """What a host time measured on `lease` is multiplied by to be the average lease's: 1 / its index."""
    return 1 / lease_index()[lease]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=Path, help="predictions (benchmarks/e2e/accuracy.py --json): the model's error too")
    p.add_argument("--write", action="store_true", help=f"freeze the indices in {INDEX.relative_to(REPO)}")
    a = p.parse_args()
    configs = json.loads(CONFIGS.read_text())["configs"]
    obs = observations(configs)
    terms, effects, spread = fit(obs)
    leases = sorted(effects)
    print(f"{len(obs)} runs of {len(terms)} configurations on {len(leases)} leases; residual sd {100 * spread:.1f} %\n")
    print(f"{'lease':13s} {'index':>6s}  configurations")
    for lease in leases:
        names = sorted({o[0] for o in obs if o[1] == lease})
        print(f"{lease:13s} {math.exp(effects[lease]):6.3f}  {', '.join(names)}")
    if a.rows:
        predicted = {r["name"]: math.log(r["step_ms"][1]) for r in json.loads(a.rows.read_text())}
        without = [fit([o for o in obs if o[1] != lease])[0] for lease in leases]
        print(f"\n{'configuration':24s} {'average lease ms':>16s} {'error there':>11s} {'one lease left out':>20s}")
        for row in HOST_BOUND:
            moved = [100 * (math.exp(predicted[row] - t[row]) - 1) for t in without if row in t]
            print(f"{row:24s} {math.exp(terms[row]):16.1f} {100 * (math.exp(predicted[row] - terms[row]) - 1):+10.1f}%"
                  f" {min(moved):+9.1f} .. {max(moved):+5.1f}%")
    if a.write:
        INDEX.write_text(json.dumps({
            "what": "Lease index: how much slower than the average lease each lease ran the host-bound ground-truth "
                    "commands (benchmarks/host/leases.py). The host model's fits divide what they measured on a "
                    "lease by its index.",
            "configurations": list(HOST_BOUND), "runs": len(obs), "residual_sd": round(spread, 4),
            "index": {lease: round(math.exp(effects[lease]), 4) for lease in leases}}, indent=1) + "\n")
        print(f"\nwrote {INDEX.relative_to(REPO)}")


if __name__ == "__main__":
    main()
