"""Fit the host model's cost of tensor ops on CPU tensors (models/host.py `cpu_bytes_per_s`, `cpu_page_fault_ns`) to
data/h200/host/cpu_tensor_ops/ (benchmarks/host/measure_cpu_tensor_ops.py), one intra-op thread as torchrun gives a
rank.

- `cpu_bytes_per_s`: bytes read plus bytes written per second of the copies (clone, stack, cat, pin_memory) whose
  output is 4 to 16 MiB, the median: larger than the caches, smaller than glibc's largest mmap threshold, so the
  heap reuses the pages of the batch before.
- `cpu_page_fault_ns`: what a pageable copy of 64 MiB takes beyond that rate, per 4 KiB page of its output: an
  allocation above glibc's mmap threshold (at most 32 MiB) is a fresh mapping each time, whose pages fault in on
  first touch.

Both are taken to the mean host, as the host model's other constants are: times the uncontended hosts' probe over the
probe that ran just before the one-thread cases, times the mean contended host's slowdown (a contended vCPU does less
of any work).

    python -m benchmarks.host.fit_cpu_tensor_ops [--dry-run]
"""

from __future__ import annotations

import json
import statistics

from benchmarks.common.fitted import fit_parser, write_fit
from benchmarks.common.paths import data_dir
from benchmarks.host.fit_python_prices import to_mean_host
from phantora.models.host import MMAP_THRESHOLD_BYTES, PAGE_BYTES

DATA = data_dir("h200", "host", "cpu_tensor_ops")
COPIES = frozenset({"clone", "stack2", "stack8", "cat2", "pin_memory"})
PINNED = frozenset({"pin_memory"})
"""Outputs from PyTorch's caching host allocator: its blocks are reused, no fresh pages."""


def moved(row: dict) -> int:
    return row["bytes_read"] + row["bytes_written"]


def fit(rows: list[dict]) -> tuple[float, float]:
    """(bytes per second, ns per page faulted in) of one thread's copies."""
    rows = [r for r in rows if r["threads"] == 1 and r["op"] in COPIES]
    rate = statistics.median(moved(r) / r["seconds"] for r in rows if 4 << 20 <= r["bytes_written"] <= 16 << 20)
    faulting = [r for r in rows if r["op"] not in PINNED and r["bytes_written"] > MMAP_THRESHOLD_BYTES]
    fault_ns = statistics.median((r["seconds"] - moved(r) / rate) / (r["bytes_written"] / PAGE_BYTES) * 1e9
                                 for r in faulting)
    return rate, fault_ns


def main() -> None:
    p = fit_parser(__doc__, DATA)
    a = p.parse_args()
    measured = json.loads((a.data / "cpu_tensor_ops.json").read_text())
    rate, fault_ns = fit(measured["rows"])
    slower = to_mean_host(measured["probes"][0]["python_loop_us"], a.specs)
    rate, fault_ns = rate / slower, fault_ns * slower
    constants = {"cpu_bytes_per_s": round(rate, -6), "cpu_page_fault_ns": round(fault_ns)}
    print(f"cpu_bytes_per_s = {rate / 1e9:.2f} GB/s, cpu_page_fault_ns = {fault_ns:.0f} at the mean host "
          f"(measured host {slower:.2f}x faster; one thread of {measured['cpus']} CPUs)")
    write_fit("benchmarks/host/fit_cpu_tensor_ops.py", a.data, "h200", "host", constants, dry_run=a.dry_run,
              specs_root=a.specs)


if __name__ == "__main__":
    main()
