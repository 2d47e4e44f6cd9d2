"""Fit `collective_ns` (models/host.py), the host time of one c10d collective call from Python, to what the calls
took in situ in framework programs' steady steps, and write it to src/phantora/specs/h200/host.json.

    python -m benchmarks.host.fit_collective_calls [--data DIR] [--specs DIR] [--dry-run]

Reads the cProfile statistics of data/h200/host/python_profiles/ (benchmarks/host/python_profiles.sh, the library
Python prices' data: none of them a held-out row). For each profile and each call of a c10d API function
(`torch.distributed.all_reduce` and the rest, through c10d_logger's wrapper): its cumulative time per call, the
wrapper's own time per call added, less cProfile's cost in situ for every profiled call under it (itself, the wrapper
and its callees, their counts per call from the callee edges; `in_situ_ratio` times the calibration), brought to the
mean lent H200 host by the profile's host-speed probe (as the prices are: benchmarks/host/fit_python_prices.py).
Per program: the mean over its ranks' calls. The constant: the median over programs, so that one program's many
calls (Megatron-core's tensor-parallel all-reduces) do not set it alone.

A call in a tight loop costs a few times less (25-45 µs on the same hosts:
benchmarks/host/measure_collective_calls.py): in a step the interpreter, ProcessGroupNCCL and the driver meet the
call with cold caches, as cProfile's own cost per call is 3.4x its calibration there.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from benchmarks.common.fitted import fit_parser, write_fit
from benchmarks.host.fit_contention import uncontended_probe_us
from benchmarks.host.fit_python_prices import DATA, mean_host_slowdown
from benchmarks.host.summarize_python_profiles import C10D_LOGGER, Function, Profile, in_situ_ratio, is_c10d_api


def calls_under(stats: dict) -> dict[Function, float]:
    """Per function, the profiled calls its one call makes, directly and below (callee edges over its calls; a
    recursion ends the walk)."""
    callees: dict[Function, dict[Function, int]] = defaultdict(dict)
    for function, row in stats.items():
        for caller, edge in row[4].items():
            callees[caller][function] = edge[1]
    found: dict[Function, float] = {}

    def under(function: Function, walking: frozenset) -> float:
        if function in found:
            return found[function]
        if function in walking:
            return 0.0
        own_calls = max(1, stats[function][1])
        total = sum(n / own_calls * (1 + under(callee, walking | {function}))
                    for callee, n in callees[function].items())
        found[function] = total
        return total

    return {f: under(f, frozenset()) for f in stats}


def call_costs(profile: Profile, in_situ: float) -> tuple[float, float]:
    """(calls per step, ns per call at the profile's host) of one rank's c10d API calls."""
    stats = profile.stats
    wrapper_own_ns = [row[2] / row[1] * 1e9 for f, row in stats.items() if f[0].endswith(C10D_LOGGER) and row[1]]
    wrapper_ns = statistics.fmean(wrapper_own_ns) if wrapper_own_ns else 0.0
    cost_per_profiled_call = in_situ * (profile.overhead.callee_ns + profile.overhead.caller_ns)
    under = calls_under(stats)
    calls, total_ns = 0, 0.0
    for function, row in stats.items():
        if not is_c10d_api(function) or not row[1]:
            continue
        profiled_calls = under[function] + 1 + (1 if wrapper_own_ns else 0)
        per_call = row[3] / row[1] * 1e9 + wrapper_ns - profiled_calls * cost_per_profiled_call
        calls += row[1]
        total_ns += row[1] * per_call
    return calls / profile.steps, (total_ns / calls if calls else 0.0)


def fit(runs: list[Profile], specs: Path, in_situ: float) -> tuple[int, dict[str, float]]:
    """(collective_ns at the mean host, each program's mean ns per call)."""
    to_reference = uncontended_probe_us() * mean_host_slowdown(specs)
    per_program: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in runs:
        calls, ns = call_costs(run, in_situ)
        per_program[run.name][0] += calls
        per_program[run.name][1] += calls * ns * to_reference / run.probe_us
    means = {name: total / calls for name, (calls, total) in sorted(per_program.items()) if calls}
    return round(statistics.median(means.values())), means


def main() -> None:
    p = fit_parser(__doc__, DATA)
    a = p.parse_args()
    runs = [Profile.load(path) for path in sorted(a.data.glob("*.profiled.rank*.pstats"))]
    ns, means = fit(runs, a.specs, in_situ_ratio(a.data))
    for name, mean in means.items():
        print(f"{name:34s} {mean / 1e3:7.1f} µs a c10d call at the mean host")
    print(f"collective_ns = {ns} (the median program)")
    write_fit("benchmarks/host/fit_collective_calls.py", a.data, "h200", "host", {"collective_ns": ns},
              dry_run=a.dry_run, specs_root=a.specs)


if __name__ == "__main__":
    main()
