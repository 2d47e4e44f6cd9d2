"""The training steps a rank marks: `<out>/rank<N>/steps.jsonl`, written by the rank (runtime/steps.py) and read
by the reports (reports/steps.py).

One JSON object a line, `{"optimizer": I, "host_ns": T, "ops": N, "simulator_cpu_s": C, "launcher_cpu_s": L}`: the
simulated host clock when optimizer I (numbered in the order the program first stepped them) finished a `step()`, and
the ops the rank had intercepted and the CPU seconds its process and the launcher's (null where unknown) had spent by
then (the simulator's own cost on this machine, not simulated numbers). The end of an optimizer step is where every
training loop's step ends, whatever the framework (gradient accumulation steps once per global batch), so the time
between two marks of one optimizer is the program's step time.
"""

from __future__ import annotations

import os

STEPS_FILE = "steps.jsonl"

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int | str) -> float | None:
    """A process's CPU time (user and system, all its threads) from /proc, None where it cannot be read (gone, or no
    /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime and stime, the 14th and 15th fields
