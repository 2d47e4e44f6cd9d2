"""Host time of library calls and step phases: a real run against a simulated one.

Both sides come from benchmarks/workloads/host_calls.py (PHANTORA_BENCH_HOST_CALLS=DIR): the real side
from `benchmarks/e2e/profile_steps.py --host-calls` (data/h200/host/calls/library/NAME/), the simulated side
from the same workload under `phantora torchrun` with the same variable set. Prints, per wrapped call,
calls per step and mean exclusive host µs on each side (the difference is the host time the model
misses per call), then the median host time of each step phase. With several REAL SIM pairs, it ends
with the pooled host time per simulated call that the simulation misses, as models/host.py's
LIBRARY_CALL_NS takes it (sum of real exclusive time per step minus the simulated one, over the
simulated calls per step: a call the simulation makes more often than torch on the GPU machine
spreads the difference).

    python -m benchmarks.host.compare_calls data/h200/host/calls/library/llama_l1b_fsdp4 /tmp/hc/llama_l1b_fsdp4
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def load(directory: Path, rank: int) -> dict:
    return json.loads((directory / f"rank{rank}.json").read_text())


def per_step_calls(run: dict) -> dict[str, tuple[float, float]]:
    """Call name -> (calls per step, mean exclusive µs)."""
    steps = max(len(run["phases"]), 1)
    return {name: (len(us) / steps, statistics.fmean(us)) for name, us in run["calls"].items() if us}


def median_phases(run: dict) -> dict[str, float]:
    names = dict.fromkeys(k for step in run["phases"] for k in step)
    return {k: statistics.median(step.get(k, 0.0) for step in run["phases"]) for k in names}


def missing_ns_per_call(pairs: list[tuple[dict, dict]]) -> dict[str, int]:
    """Call name -> host ns per simulated call that the simulation misses, pooled over (real, sim) runs."""
    real_us: dict[str, float] = {}
    sim_us: dict[str, float] = {}
    sim_calls: dict[str, float] = {}
    for real, sim in pairs:
        rc, sc = per_step_calls(real), per_step_calls(sim)
        for name, (n, us) in sc.items():
            rn, rus = rc.get(name, (0.0, 0.0))
            real_us[name] = real_us.get(name, 0.0) + rn * rus
            sim_us[name] = sim_us.get(name, 0.0) + n * us
            sim_calls[name] = sim_calls.get(name, 0.0) + n
    return {name: max(round((real_us[name] - sim_us[name]) / sim_calls[name] * 1e3 / 100) * 100, 0)
            for name in sorted(sim_calls)}


def compare(real: dict, sim: dict) -> None:
    rc, sc = per_step_calls(real), per_step_calls(sim)
    print(f"{'call':45s} {'n/step real':>11s} {'sim':>6s} {'real µs':>9s} {'sim µs':>9s} {'missing µs':>10s} {'missing ms/step':>15s}")
    for name in sorted(set(rc) | set(sc)):
        rn, rus = rc.get(name, (0.0, 0.0))
        sn, sus = sc.get(name, (0.0, 0.0))
        print(f"{name:45s} {rn:11.1f} {sn:6.1f} {rus:9.1f} {sus:9.1f} {rus - sus:10.1f} {(rus - sus) * rn / 1e3:15.2f}")
    rp, sp = median_phases(real), median_phases(sim)
    print(f"\n{'phase':12s} {'real ms':>9s} {'sim ms':>9s}")
    for name in rp:
        print(f"{name:12s} {rp[name] / 1e3:9.2f} {sp.get(name, 0.0) / 1e3:9.2f}")
    print(f"{'sum':12s} {sum(rp.values()) / 1e3:9.2f} {sum(sp.values()) / 1e3:9.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", type=Path, nargs="+", help="REAL SIM [REAL SIM ...]")
    p.add_argument("--rank", type=int, default=0)
    a = p.parse_args()
    if len(a.runs) % 2:
        p.error("give REAL SIM pairs")
    pairs = [(load(a.runs[i], a.rank), load(a.runs[i + 1], a.rank)) for i in range(0, len(a.runs), 2)]
    for (real, sim), where in zip(pairs, a.runs[::2]):
        print(f"== {where}")
        compare(real, sim)
    if len(pairs) > 1:
        print("\nmissing host ns per simulated call, pooled:")
        print(json.dumps(missing_ns_per_call(pairs), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
