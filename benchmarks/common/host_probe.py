"""How fast this machine's CPU runs Python and launches kernels right now: a lease's host-speed index.

The same fixed work as timeline.py's per-step probes (PHANTORA_BENCH_SCHED=1): 100,000 iterations of a
pure-Python loop, and 200 small kernel launches (`x = x + 1` on 256 floats) without synchronising.
Leases of the same machine type differ by up to 1.8x in host speed (data/h200/host/leases/README.md), and
one process of a run can be 1.6x slower than its siblings (data/h200/e2e/timelines/runs/2026-11-22-11): host-bound ground truth
is only comparable with the host speed it ran at. Prints one JSON line (medians of 21 rounds, µs).

    python -m benchmarks.common.host_probe [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

from benchmarks.workloads import timeline  # the probes live there, so both measure the same work


def median_call_s(call: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median seconds of one call of `call`, after `warmup` calls; each call's result is dropped before the next
    (as a data pipeline drops a batch)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
        del out
    return statistics.median(times)


def probe_apart(label: str) -> dict:
    """The probe in a process of its own (as `python -m benchmarks.common.host_probe`), from a measuring program
    that keeps its GPUs and threads busy: its JSON, or {} where it failed."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-m", "benchmarks.common.host_probe", "--label", label],
                          capture_output=True, text=True, cwd=repo)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else {}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="")
    p.add_argument("--rounds", type=int, default=21)
    a = p.parse_args()
    rounds = [timeline.host_probes() for _ in range(a.rounds)]
    print(json.dumps({"label": a.label, "cpu": len(os.sched_getaffinity(0)),
                      **{key: statistics.median(r[key] for r in rounds) for key in rounds[0]}}), flush=True)


if __name__ == "__main__":
    main()
