"""A CPU-heavy pure-Python loop between two GPU ops, timed on the simulated clock and on this thread's
real CPU clock (`time.thread_time_ns` is not virtualised).

Prints `HOSTTIME {json}` for tests/integration/test_measured_host_time.py.
"""

import json
import time

import torch


def busy(n: int) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


a = torch.ones(16, device="cuda")
b = torch.ones(16, device="cuda")
a.add_(b)
torch.cuda.synchronize()
t0 = time.perf_counter_ns()
c0 = time.thread_time_ns()
busy(300_000)
c1 = time.thread_time_ns()
t1 = time.perf_counter_ns()
a.add_(b)
t2 = time.perf_counter_ns()
print("HOSTTIME " + json.dumps({"loop_ns": t1 - t0, "loop_cpu_ns": c1 - c0, "add_ns": t2 - t1}), flush=True)
