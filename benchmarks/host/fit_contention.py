"""Fit the host-contention model (models/host_contention.py) to the host-speed probes of real runs.

Reads every layer timeline recorded with PHANTORA_BENCH_SCHED=1 under data/h200/e2e/timelines/ (a probe after
each step and rank: `python_loop_us`, a fixed pure-Python loop; benchmarks/workloads/timeline.py) and prints:

- the contended fraction: probes slower than THRESHOLD_US over all probes, and per lease (uncontended ones take
  4.4-5.3 ms, contended 6.5-10.5 ms: data/h200/host/leases/README.md);
- how fast the state changes: transitions between consecutive steps' probes of one rank, and the
  correlation time they give;
- the contended factor of host work: a rank's forward host time (first layer's start to last layer's
  end) in steps whose probes before and after are both contended, over the median of the same
  configuration's steps whose probes before and after are both uncontended.

    python -m benchmarks.host.fit_contention [--specs DIR]

and writes the fraction, the factor and the correlation time (`dwell_s`) to src/phantora/specs/h200/
host_contention.json (the hosts the H200's host constants were measured on; `--host-contention h200-vm`).
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, data_dir, relative
from benchmarks.e2e import groundtruth
from benchmarks.host import leases

TIMELINES = data_dir("h200", "e2e", "timelines")
THRESHOLD_US = 6000.0
"""Between the two speeds' loop times."""


GROUND_TRUTH = {c["name"] for c in groundtruth.CONFIGS}
"""The contended factor comes from these configurations' timelines only: a diagnostic variant (the MoE with
balanced routing, whose forward waits for the GPU at every layer) tells nothing about it."""


def timelines() -> list[tuple[str, str, dict]]:
    """(lease, configuration, rank file) of every timeline with host-speed probes."""
    found = []
    for path in sorted(glob.glob(os.path.join(TIMELINES, "**", "rank*.json"), recursive=True)):
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict) and any("python_loop_us" in s for s in data.get("sched") or []):
            lease = leases.lease_of_path(path) or "unknown"
            found.append((lease, os.path.basename(os.path.dirname(path)), data))
    return found


@functools.cache
def uncontended_probe_us() -> float:
    """The probe's median time on the uncontended H200 hosts, over every timeline's probes (read once: every
    probed comparison and fit asks for it)."""
    probes = [s["python_loop_us"] for _, _, data in timelines() for s in data.get("sched") or []
              if "python_loop_us" in s]
    return statistics.median(p for p in probes if p < THRESHOLD_US)


def forward_host_ms(step: list) -> float | None:
    """Host time from the first layer's forward start to the last layer's forward end."""
    marks = {label: host for label, host, _ in step}
    ends = [label for label in marks if label.endswith(".fwd_end")]
    if "L0.fwd" not in marks or not ends:
        return None
    last = max(ends, key=lambda label: int(label[1:].split(".")[0]))
    return (marks[last] - marks["L0.fwd"]) / 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = p.parse_args()
    probes, transitions, step_s, by_lease = [], defaultdict(int), [], defaultdict(list)
    seconds_in = defaultdict(float)
    """Time spent in each state between consecutive probes (one step of that timeline each): the rates."""
    forward = defaultdict(lambda: {"uncontended": [], "contended": []})
    for lease, config, data in timelines():
        states = [s["python_loop_us"] > THRESHOLD_US for s in data["sched"]]
        probes += [s["python_loop_us"] for s in data["sched"]]
        by_lease[lease] += states
        steps = [step[-1][1] / 1e6 for step in data["steps"]]
        step_s += steps
        period = statistics.median(steps)
        for before, after in zip(states, states[1:]):
            transitions[(before, after)] += 1
            seconds_in[before] += period
        for i in range(1, len(states)):
            ms = forward_host_ms(data["steps"][i])
            if ms is not None and states[i - 1] == states[i] and config in GROUND_TRUTH:
                forward[config]["contended" if states[i] else "uncontended"].append(ms)
    contended = sum(p > THRESHOLD_US for p in probes) / len(probes)
    leave = transitions[(True, False)] / (transitions[(True, False)] + transitions[(True, True)])
    enter = transitions[(False, True)] / (transitions[(False, True)] + transitions[(False, False)])
    # each timeline's probes are one of its steps apart: the rates per second of leaving and entering contention
    leave_per_s = transitions[(True, False)] / seconds_in[True]
    enter_per_s = transitions[(False, True)] / seconds_in[False]
    correlation_s = 1 / (leave_per_s + enter_per_s)
    print(f"probes: {len(probes)}, contended fraction {contended:.3f} ("
          + ", ".join(f"{lease} {sum(v) / len(v):.2f} of {len(v)}" for lease, v in sorted(by_lease.items())) + ")")
    print(f"between steps ({statistics.median(step_s) * 1000:.0f} ms apart, median): P(contended -> not) {leave:.2f}, "
          f"P(not -> contended) {enter:.2f}; per second {leave_per_s:.2f} and {enter_per_s:.2f}: correlation time "
          f"{correlation_s:.2f} s, stationary contended fraction {enter_per_s / (enter_per_s + leave_per_s):.3f}")
    ratios = []
    for config, times in sorted(forward.items()):
        if len(times["uncontended"]) < 3 or not times["contended"]:
            continue
        base = statistics.median(times["uncontended"])
        mine = [t / base for t in times["contended"]]
        ratios += mine
        print(f"{config}: forward host {base:.1f} ms uncontended (n={len(times['uncontended'])}), contended / that: "
              + " ".join(f"{r:.2f}" for r in sorted(mine)))
    factor = statistics.median(ratios)
    print(f"contended factor of forward host time: median {factor:.2f} over {len(ratios)} steps")
    constants = {"contended_fraction": round(contended, 2), "contended_factor": round(factor, 2),
                 "dwell_s": round(correlation_s, 2)}
    source = f"benchmarks/host/fit_contention.py on the host-speed probes in {relative(TIMELINES)}"
    written = update_fitted("h200", "host_contention", constants, dict.fromkeys(constants, source),
                            specs_root=args.specs)
    print(f"wrote {written}")


if __name__ == "__main__":
    main()
