"""Per library, the Python a framework program runs per step on the reference host: calls and own time, from the
cProfile statistics of benchmarks/host/python_profiles.sh (data/h200/host/python_profiles/).

    python -m benchmarks.host.summarize_python_profiles [--data DIR] [--top N] [--json OUT]
    python -m benchmarks.host.summarize_python_profiles --in-situ    # what profiling cost in situ, per call

A function's own time is cProfile's `tottime`: its bytecode and the C it runs inline, not the functions it calls,
Python or C. Torch ops and other C functions are profiled calls of their own (`builtin` below), so a library's
own time holds none of them; `builtin` holds the ops and the host's waits for the GPU. cProfile's own cost lands in
both the callee's and the caller's own time: the profile's calibration (an empty function called a million times,
profiled and not) gives both shares, and `corrected` takes them off, per call made and per call received. Per step:
divided by the optimizer steps profiled. The prices the host model charges per library function are fitted from the
same profiles by benchmarks/host/fit_python_prices.py.

`--in-situ` reads the runs profiled every other step (`<name>.alternate.*`, PROFILE_ALTERNATE=1) of host-bound
programs: the median host time of a profiled step less an unprofiled one's, per call the profiled step made, against
the calibration's cost per call (an empty function's, received and made).
"""

from __future__ import annotations

import argparse
import functools
import json
import pstats
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from benchmarks.common.paths import BENCHMARKS, data_dir
from benchmarks.e2e.frameworks.accuracy import parse_result

DATA = data_dir("h200", "host", "python_profiles")
SITE = re.compile(r"(?:site-packages|/tmp/site|/tmp/tt_site)/(.+)$")
"""Where packages lie: site packages, and the GPU machines' `pip install --target` folders (the carried wheels in
/tmp/site, TorchTitan's own set in /tmp/tt_site: benchmarks/e2e/frameworks/README.md)."""

Function = tuple[str, int, str]
"""cProfile's key of a function: (file, first line, name)."""


C10D_API = frozenset({"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single",
                      "all_gather", "reduce_scatter", "reduce", "gather", "scatter", "all_to_all", "send", "recv",
                      "isend", "irecv"})
"""The c10d API functions that issue one collective or point-to-point call (barrier waits; it is not one)."""
C10D_LOGGER = "torch/distributed/c10d_logger.py"
"""The decorators' wrappers around the c10d API."""


def is_c10d_api(function: Function) -> bool:
    return function[0].endswith("torch/distributed/distributed_c10d.py") and function[2] in C10D_API


def is_c10d_call(function: Function) -> bool:
    """A c10d collective call's Python: the API function or the wrapper its decorators put around it (the host
    model's `collective_ns` charges the whole call)."""
    return is_c10d_api(function) or function[0].endswith(C10D_LOGGER)


def library_of(function: Function) -> str:
    """The top-level package a function's file belongs to: a site package, `examples`, `stdlib`, or `builtin` (C)."""
    path = function[0]
    if path == "~":
        return "builtin"
    site = SITE.search(path)
    if site:
        return site.group(1).split("/")[0]
    if "/examples/" in path or path.startswith("examples/"):
        return "examples"
    return "stdlib" if "/python3." in path or path.startswith("<frozen") else "other"


def portable(function: Function) -> Function:
    """The function's key with its file relative to the site packages, the same on the GPU machine and here."""
    site = SITE.search(function[0])
    return (site.group(1) if site else function[0], function[1], function[2])


@dataclass(frozen=True)
class Overhead:
    """cProfile's own cost in ns: added to a function's own time per call it receives, and per call it makes."""

    callee_ns: float
    caller_ns: float

    @classmethod
    def from_calibration(cls, c: dict) -> "Overhead":
        empty_call = c["plain_call_and_loop_ns"] - c["plain_loop_ns"]  # a call and return, half of it the callee's
        return cls(callee_ns=c["profiled_callee_own_ns"] - empty_call / 2,
                   caller_ns=c["profiled_caller_own_ns"] - c["plain_loop_ns"] - empty_call / 2)


@dataclass(frozen=True)
class Profile:
    """One rank's profile: cProfile's statistics, the steps they cover, cProfile's own cost on that host (calibrated
    at the process's start, when its plain loop took `calibration_loop_ns` an iteration) and the host-speed probe's
    mean over the profiled steps (None for a profile taken without probes)."""

    name: str
    stats: dict
    steps: int
    overhead: Overhead
    calibration_loop_ns: float
    probe_us: float | None

    @classmethod
    def load(cls, pstats_path: Path) -> "Profile":
        record = json.loads(pstats_path.with_suffix(".json").read_text())
        probes = record.get("python_loop_probe_us")
        return cls(pstats_path.name.split(".profiled.")[0], pstats.Stats(str(pstats_path)).stats,
                   record["profiled_steps"], Overhead.from_calibration(record["calibration"]),
                   record["calibration"]["plain_loop_ns"], statistics.fmean(probes) if probes else None)

    def functions(self, overhead_scale: float = 1.0) -> Iterator[tuple[Function, int, float, float]]:
        """(function, calls, own ms, own ms less cProfile's cost) over the profiled steps, for every function; the
        calibrated cost per call times `overhead_scale` (the steps' host speed over the calibration's)."""
        made: Counter = Counter()
        for row in self.stats.values():
            for caller, (_, calls, _, _) in row[4].items():
                made[caller] += calls
        for function, (_, calls, own_s, _, _) in self.stats.items():
            cost_ns = overhead_scale * (calls * self.overhead.callee_ns + made[function] * self.overhead.caller_ns)
            yield function, calls, own_s * 1e3, max(0.0, own_s * 1e3 - cost_ns * 1e-6)


@dataclass
class Library:
    calls_per_step: float = 0.0
    own_ms_per_step: float = 0.0
    corrected_ms_per_step: float = 0.0

    @property
    def corrected_us_per_call(self) -> float:
        return 1e3 * self.corrected_ms_per_step / self.calls_per_step if self.calls_per_step else 0.0


def summarize(profile: Profile) -> tuple[dict[str, Library], list[tuple[str, float, float]]]:
    """(library -> per-step totals, the functions by corrected own time per step) of one profile."""
    libraries: dict[str, Library] = defaultdict(Library)
    functions = []
    for function, calls, own_ms, corrected_ms in profile.functions():
        library = libraries[library_of(function)]
        library.calls_per_step += calls / profile.steps
        library.own_ms_per_step += own_ms / profile.steps
        library.corrected_ms_per_step += corrected_ms / profile.steps
        functions.append((f"{library_of(function)}:{Path(function[0]).name}:{function[1]}({function[2]})",
                          calls / profile.steps, corrected_ms / profile.steps))
    functions.sort(key=lambda f: -f[2])
    return dict(libraries), functions


@functools.cache
def profiled_configs() -> dict[str, dict]:
    """benchmarks/host/python_profiles.json's configurations by name (read once)."""
    return {c["name"]: c for c in json.loads((BENCHMARKS / "host" / "python_profiles.json").read_text())["configs"]}


def step_ms(log: Path) -> float | None:
    """The program's own median step time from its log `<name>[.profiled].log`, as the framework accuracy benchmark
    reads it (TorchTitan's from its per-step lines, which its configuration's batch and sequence turn into time)."""
    config = profiled_configs().get(log.name.split(".")[0], {})
    found = parse_result(log.read_text(errors="replace"), config)
    return found and found["step_s"] * 1e3


def report(data: Path, top: int) -> dict:
    table = {}
    for path in sorted(data.glob("*.profiled.rank*.pstats")):
        name = path.name.split(".profiled.")[0]
        rank = path.name.split(".rank")[1].split(".")[0]
        profile = Profile.load(path)
        libraries, functions = summarize(profile)
        plain, profiled = step_ms(data / f"{name}.log"), step_ms(data / f"{name}.profiled.log")
        print(f"== {name}, rank {rank}: {profile.steps} steps profiled; step {plain:.1f} ms plain, "
              f"{profiled:.1f} ms profiled")
        print(f"   {'library':16s} {'calls/step':>10s} {'own ms':>8s} {'corrected ms':>12s} {'µs/call':>8s}")
        for lib, row in sorted(libraries.items(), key=lambda kv: -kv[1].corrected_ms_per_step):
            if row.own_ms_per_step >= 0.5:
                print(f"   {lib:16s} {row.calls_per_step:10.0f} {row.own_ms_per_step:8.1f} {row.corrected_ms_per_step:12.1f}"
                      f" {row.corrected_us_per_call:8.2f}")
        for label, calls, ms in functions[:top]:
            print(f"      {ms:6.2f} ms {calls:7.0f} calls  {label}")
        table[f"{name}.rank{rank}"] = {"profiled_steps": profile.steps, "step_ms": plain, "profiled_step_ms": profiled,
                                       "libraries": {k: {**asdict(v), "corrected_us_per_call": v.corrected_us_per_call}
                                                     for k, v in libraries.items()}}
    return table


@dataclass(frozen=True)
class InSitu:
    """What profiling cost per call in one alternating run, measured and calibrated, in ns."""

    name: str
    plain_step_ms: float
    profiled_step_ms: float
    calls_per_step: float
    measured_ns: float
    calibrated_ns: float

    @property
    def ratio(self) -> float:
        return self.measured_ns / self.calibrated_ns


def in_situ_costs(data: Path) -> list[InSitu]:
    """Per alternating run and rank: the median host time of a profiled step less an unprofiled one's, per call the
    profiled steps made, against the calibration's cost per call (received and made)."""
    found = []
    for path in sorted(data.glob("*.alternate.rank*.pstats")):
        record = json.loads(path.with_suffix(".json").read_text())
        profiled = statistics.median(s for was_profiled, s in record["step_host_s"] if was_profiled)
        plain = statistics.median(s for was_profiled, s in record["step_host_s"] if not was_profiled)
        calls = sum(row[1] for row in pstats.Stats(str(path)).stats.values()) / record["profiled_steps"]
        overhead = Overhead.from_calibration(record["calibration"])
        found.append(InSitu(path.name.removesuffix(".pstats"), plain * 1e3, profiled * 1e3, calls,
                            (profiled - plain) * 1e9 / calls, overhead.callee_ns + overhead.caller_ns))
    return found


def in_situ_ratio(data: Path) -> float:
    """cProfile's cost per call in situ over its calibrated cost: the median over the alternating runs. An empty
    function called in a tight loop keeps cProfile's tables and the interpreter's caches warm; a framework's step
    does not."""
    costs = in_situ_costs(data)
    if not costs:
        raise FileNotFoundError(f"no alternating runs (<name>.alternate.rank<R>.pstats) in {data}")
    return statistics.median(c.ratio for c in costs)


def in_situ(data: Path) -> None:
    """What profiling cost per call in the alternating runs, against the calibrated cost."""
    for c in in_situ_costs(data):
        print(f"{c.name:48s} step {c.plain_step_ms:6.1f} ms, profiled {c.profiled_step_ms:6.1f}; "
              f"{c.calls_per_step:7.0f} calls: {c.measured_ns:5.0f} ns a call in situ, "
              f"{c.calibrated_ns:4.0f} calibrated ({c.ratio:.1f}x)")
    print(f"median {in_situ_ratio(data):.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--top", type=int, default=8, help="functions to list per profile")
    p.add_argument("--json", type=Path, help="write the per-library table here")
    p.add_argument("--in-situ", action="store_true", help="what profiling cost in the alternating runs")
    a = p.parse_args()
    if a.in_situ:
        in_situ(a.data)
        return
    table = report(a.data, a.top)
    if a.json:
        a.json.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
