"""Where a simulated step's host time differs from a real one's: the host's launch timeline, op by op.

The real side is a program's own profiler trace of one step (TorchTitan's, as kept in
data/h200/e2e/frameworks/profiles/NAME.rankR.trace.json.gz): each GPU activity's launch (`cudaLaunchKernel`,
`cudaMemcpyAsync`, ...) at the host time it was made, named by the ATen op (or the annotation) that made it. The
simulated side is a Phantora `trace.json`: each kernel's `launch_us` in the rank's last whole step
(`compare_step.last_step_kernels`). Both sequences of op names are aligned (difflib), and the host time between
consecutive aligned launches is compared: the segments where the real host took longest over the simulated one are
printed with the ops that bound them and the real annotations they fall in (the data loader, FSDP's hooks, the
optimizer). A segment's time is whatever the host did between two launches: its own work, or a wait (a
synchronization) for the GPU; both sides count the same way. The profiled step carries the profiler's own cost per op
(a few µs), which a long segment of few ops hardly feels.

    python -m benchmarks.e2e.compare_launches \
        data/h200/e2e/frameworks/profiles/torchtitan_deepseek_v3_debug_ep2_balanced.rank0.trace.json.gz OUT/trace.json
"""

from __future__ import annotations

import argparse
import bisect
import difflib
import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from benchmarks.e2e.compare_step import last_step_kernels

_LAUNCHES = re.compile(r"^cuda(LaunchKernel|LaunchKernelExC|MemcpyAsync|MemsetAsync|Memcpy|Memset)|^cuLaunchKernel")
_ATEN = re.compile(r"^aten::([A-Za-z0-9_]+)")


@dataclass(frozen=True)
class Launch:
    op: str
    """The op that launched it, as `aten.mm` (overload left out), or an annotation's name."""
    host_us: float
    """When the host launched it, µs from the step's first launch."""
    within: str = ""
    """The outermost annotation around it on the real side (`FSDP::pre_forward`, ...), '' on the simulated one."""


def op_name(name: str) -> str:
    """`aten::mm` and `aten.mm.default` alike: `aten.mm`; other names as they are."""
    match = _ATEN.match(name)
    if match:
        return f"aten.{match.group(1)}"
    if name.startswith("aten."):
        return ".".join(name.split(".")[:2])
    return name


def real_launches(path: Path) -> list[Launch]:
    """The launches of a profiler trace's one profiled step, on its threads, in host order."""
    events = json.load(gzip.open(path, "rt"))["traceEvents"]
    step = next(e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep"))
    lo, hi = step["ts"], step["ts"] + step["dur"]
    inside = [e for e in events if "dur" in e and lo <= e["ts"] < hi]
    spans: dict[object, list[dict]] = defaultdict(list)
    for e in inside:
        if e.get("cat") in ("cpu_op", "user_annotation") and e is not step:
            spans[e["tid"]].append(e)
    for tid in spans:
        spans[tid].sort(key=lambda e: (e["ts"], -e["dur"]))
    launches = []
    for e in inside:
        if e.get("cat") == "cuda_runtime" and _LAUNCHES.match(e["name"]):
            ops, notes = _around(spans.get(e["tid"], []), e["ts"])
            launches.append(Launch(op_name(ops[-1]["name"]) if ops else e["name"], e["ts"],
                                   notes[0]["name"] if notes else ""))
    launches.sort(key=lambda launch: launch.host_us)
    start = launches[0].host_us if launches else 0.0
    return [Launch(x.op, x.host_us - start, x.within) for x in launches]


def _around(spans: list[dict], ts: float) -> tuple[list[dict], list[dict]]:
    """The cpu ops (outermost first) and the annotations that enclose time `ts` on one thread."""
    starts = [s["ts"] for s in spans]
    enclosing = [s for s in spans[:bisect.bisect_right(starts, ts)] if s["ts"] + s["dur"] >= ts]
    ops = [s for s in enclosing if s.get("cat") == "cpu_op"]
    notes = [s for s in enclosing if s.get("cat") == "user_annotation" and not s["name"].startswith("ProfilerStep")]
    return ops, notes


def simulated_launches(trace: Path, rank: int) -> list[Launch]:
    """The launches of a Phantora trace's last whole step of `rank`, in host order."""
    kernels = sorted(last_step_kernels(trace, rank), key=lambda e: e["args"].get("launch_us", e["ts"]))
    start = kernels[0]["args"].get("launch_us", kernels[0]["ts"]) if kernels else 0.0
    return [Launch(op_name(e["name"]), e["args"].get("launch_us", e["ts"]) - start) for e in kernels]


@dataclass(frozen=True)
class Segment:
    """The host time between two aligned launches, on both sides."""

    first: Launch
    last: Launch
    real_us: float
    simulated_us: float
    ops: int
    """Real launches inside the segment."""


def segments(real: list[Launch], simulated: list[Launch]) -> list[Segment]:
    """The host time between consecutive launches that both sides made (same op, aligned in order)."""
    matcher = difflib.SequenceMatcher(None, [x.op for x in real], [x.op for x in simulated], autojunk=False)
    pairs = [(block.a + k, block.b + k) for block in matcher.get_matching_blocks() for k in range(block.size)]
    return [Segment(real[i], real[j], real[j].host_us - real[i].host_us,
                    simulated[m].host_us - simulated[k].host_us, j - i)
            for (i, k), (j, m) in zip(pairs, pairs[1:])]


def report(real: list[Launch], simulated: list[Launch], top: int) -> None:
    found = segments(real, simulated)
    matched_real = sum(s.real_us for s in found)
    matched_sim = sum(s.simulated_us for s in found)
    print(f"launches: real {len(real)}, simulated {len(simulated)}, aligned {len(found) + 1}")
    print(f"host span: real {real[-1].host_us / 1e3:.2f} ms, simulated {simulated[-1].host_us / 1e3:.2f} ms; "
          f"between aligned launches: real {matched_real / 1e3:.2f} ms, simulated {matched_sim / 1e3:.2f} ms")
    by_note: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s in found:
        by_note[s.last.within or "(no annotation)"][0] += s.real_us
        by_note[s.last.within or "(no annotation)"][1] += s.simulated_us
    print(f"\n{'real annotation around the segment end':<48}{'real ms':>9}{'sim ms':>9}{'real - sim':>11}")
    for note, (r, m) in sorted(by_note.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))[:top]:
        print(f"{note[:47]:<48}{r / 1e3:9.2f}{m / 1e3:9.2f}{(r - m) / 1e3:11.2f}")
    print(f"\n{'segment (first op -> last op), real launches':<70}{'real ms':>9}{'sim ms':>9}{'real - sim':>11}")
    for s in sorted(found, key=lambda s: s.simulated_us - s.real_us)[:top]:
        label = f"{s.first.op} -> {s.last.op} ({s.ops}) {s.last.within}"
        print(f"{label[:69]:<70}{s.real_us / 1e3:9.2f}{s.simulated_us / 1e3:9.2f}{(s.real_us - s.simulated_us) / 1e3:11.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("real", type=Path, help="a profiler trace of one step (*.trace.json.gz)")
    p.add_argument("simulated", type=Path, help="a Phantora trace.json of the same configuration")
    p.add_argument("--rank", type=int, default=0, help="the simulated rank (default 0)")
    p.add_argument("--top", type=int, default=15, help="how many rows of each table (default 15)")
    a = p.parse_args()
    report(real_launches(a.real), simulated_launches(a.simulated, a.rank), a.top)


if __name__ == "__main__":
    main()
