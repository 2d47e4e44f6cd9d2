"""What a simulated launch-bound phase is charged for, read off `phantora run` itself.

The host fits (`fit_context`, `fit_compiled`) need, for each phase of each `measure_launch_bound.py` variant, its
simulated time with the fitted terms at zero (the base) and how many times each term would be charged (kernel ops,
module calls, compiled graph calls, ...). Both come from running the variants under `phantora run` from a copy of
the package whose `specs/h200/host.json` has the terms changed: once with them at zero, then with up to three of
them a thousandfold apart (`SLOTS_NS`), so that a phase's time over its base is a number whose digit groups are the
counts. That much host time also hides the GPU waits of the base run (a launch queue, a CUDA graph's memory, a
synchronize), so the difference is the counts' charges less those waits, which are shorter than half a count of the
last slot (`decode`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.common.paths import REPO

SLOTS_NS = (10**13, 10**10, 10**7)
"""The counted terms' values in a counting run, most significant first. A phase then takes 10^4 s per count of
the first, 10 s per count of the second and 10 ms per count of the third more than its base: counts of the second
and third must stay below 1000 per phase, of the first below 10^5 (int64 nanoseconds of simulated time)."""


def simulate_phases(names: Sequence[str], constants: Mapping[str, int], *, warmup: int) -> dict[str, dict[str, float]]:
    """variant -> phase -> simulated ms of one step after `warmup`, with the host model's `constants` changed: run by
    `phantora run` from a copy of the package whose specs/h200/host.json has them."""
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "phantora"
        shutil.copytree(REPO / "src" / "phantora", package, ignore=shutil.ignore_patterns("__pycache__"))
        host = package / "specs" / "h200" / "host.json"
        fitted = json.loads(host.read_text())
        fitted["constants"].update(constants)
        host.write_text(json.dumps(fitted))
        out = Path(tmp) / "phases.json"
        command = [sys.executable, "-m", "phantora.cli.main", "run", "--gpu", "h200", "--out", str(Path(tmp) / "run"),
                   "--host-contention", "h200-vm",
                   "--", "python", "-m", "benchmarks.host.measure_launch_bound", "--only", ",".join(names),
                   "--steps", "1", "--warmup", str(warmup), "--no-extras", "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, str(REPO)])}
        subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        return {v["name"]: v["phase_ms_median"] for v in json.loads(out.read_text())["variants"]}


def decode(base_ms: float, counting_ms: float, counted: Sequence[str]) -> dict[str, int]:
    """The counts of the terms in `SLOTS_NS`'s slots (most significant first) from a phase's time in a counting
    run over its base. The base may include a wait for the GPU that the counting run's host time hides (a phase
    ending in a synchronize): less than half a count of the last slot, so the difference is rounded up to one."""
    slots = SLOTS_NS[:len(counted)]
    unit = slots[-1]
    over_base_ns = (counting_ms - base_ms) * 1e6
    units = math.ceil(over_base_ns / unit - 0.01)  # 0.01: the phases' float milliseconds
    hidden_wait_ns = units * unit - over_base_ns
    if not -0.01 * unit <= hidden_wait_ns < 0.5 * unit:
        raise RuntimeError(f"a counting run's phase is not a whole count over its base: {counting_ms} - {base_ms} ms")
    counts, rest = {}, units * unit
    for name, ns in zip(counted, slots):
        counts[name], rest = divmod(rest, ns)
    return counts


def count_charges(names: Sequence[str], terms: Mapping[str, str], runs: Sequence[Sequence[str]], *,
                  warmup: int, zeroed: Sequence[str] = ()) -> dict[str, dict[str, dict]]:
    """variant -> phase -> {"base_ms", one count per term}: `terms` maps each count's name to the host constant
    charged per count, `runs` groups the counts, up to three a counting run, the largest first (`SLOTS_NS`);
    `zeroed`: other constants at zero in every run (fitted too, but not counted)."""
    zero = dict.fromkeys([*terms.values(), *zeroed], 0)
    base = simulate_phases(names, zero, warmup=warmup)
    out = {name: {phase: {"base_ms": ms} for phase, ms in phases.items()} for name, phases in base.items()}
    for counted in runs:
        counting = simulate_phases(names, {**zero, **{terms[c]: ns for c, ns in zip(counted, SLOTS_NS)}},
                                   warmup=warmup)
        for name, phases in counting.items():
            for phase, ms in phases.items():
                out[name][phase].update(decode(base[name][phase], ms, counted))
    return out
