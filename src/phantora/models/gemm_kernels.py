"""Which kernel cuBLAS runs for a GEMM problem, where it was measured: the first launch of a kernel costs the host.

Note [First launch of a cuBLAS kernel]
The first time a process launches a given cuBLAS kernel (on the H200: an `nvjet_sm90_*` kernel) its host
spends 3-5 ms in the GEMM call, on top of choosing an algorithm for a new problem (`gemm_select_ns`).
CUDA_MODULE_LOADING=EAGER does not remove it (data/h200/host/first_launch). Steps of fixed shapes pay it in their first
step. A mixture-of-experts layer's experts get a new row count almost every call, cuBLAS picks one of ~15
kernels per GEMM by the row count, and a new pick stalls the rank's host: moe_a2a's 4-GPU timelines show
4-5 ms forward and 6-23 ms backward stalls at the same calls on two leases (calls 31 and 39), in steps 3-10
of a 12-step run, and none with balanced routing. Replaying those row counts on one GPU (calls 44, 45) put
the stalls exactly where the table below says a kernel is launched for the first time.

Which kernel cuBLAS picks is its heuristics' business, so it is not modelled: it is measured. A table holds,
per GEMM family (the op, its inputs' shapes with one size free, strides and dtypes), the kernel for each
value of the free size in a measured range (benchmarks/kernels/gemm_kernels.py from
`measure_gemm_first_use.py --sweep`). It covers the expert GEMMs of the MoE workload, whose shapes change in
steady state. Elsewhere a kernel database entry of the exact op can name its kernels: `phantora profile` and
on-the-fly profiling record them (`DbEntry.kernels`). A problem known to neither pays no first launch.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Sequence

FORMAT = "phantora-gemm-kernels"
FREE = "*"
"""Marks the free size in a family's shapes (and strides) in the table file."""

Layout = tuple[tuple[int, ...], tuple[int, ...], str]
"""An input's shape, stride and dtype, as `HostModel.gemm_problem` gives them."""


@dataclass(frozen=True, slots=True)
class _Family:
    lo: int
    hi: int
    starts: tuple[int, ...]
    """Free sizes where the kernel changes, ascending; `starts[0] == lo`."""
    kernels: tuple[str, ...]
    """The kernel from each start to the next."""

    def kernel(self, size: int) -> str | None:
        if not self.lo <= size <= self.hi:
            return None
        return self.kernels[bisect.bisect_right(self.starts, size) - 1]


def _family_key(op: str, inputs: Sequence[Layout], free: int | None) -> tuple:
    """The family of `inputs` with every occurrence of `free` in shapes and strides made the free size."""
    mark = lambda dims: tuple(None if d == free else d for d in dims)  # noqa: E731
    return op, tuple((mark(shape), mark(stride), dtype) for shape, stride, dtype in inputs)


class GemmKernelTable:
    """Measured kernel per GEMM problem for one GPU model (Note [First launch of a cuBLAS kernel])."""

    def __init__(self, families: dict[tuple, _Family] | None = None) -> None:
        self._families = dict(families or {})

    def __len__(self) -> int:
        return len(self._families)

    @classmethod
    def from_dict(cls, data: dict) -> "GemmKernelTable":
        if data.get("format") != FORMAT or data.get("version") != 1:
            raise ValueError(f"not a {FORMAT} version 1 table")
        names = data["kernels"]
        families = {}
        for f in data["families"]:
            free = lambda dims: tuple(None if d == FREE else int(d) for d in dims)  # noqa: E731
            key = (f["op"], tuple((free(shape), free(stride), str(dtype)) for shape, stride, dtype in f["inputs"]))
            starts, kernels = zip(*((int(start), names[index]) for start, index in f["runs"]))
            lo, hi = f["sizes"]
            if list(starts) != sorted(starts) or starts[0] != lo or hi < starts[-1]:
                raise ValueError(f"{FORMAT}: runs of {f['op']} {f['inputs']} do not cover {lo}..{hi} in order")
            families[key] = _Family(lo, hi, starts, kernels)
        return cls(families)

    @classmethod
    def packaged(cls, gpu: str) -> "GemmKernelTable":
        """The table shipped for `gpu` (`phantora/data/<gpu>/gemm_kernels.json`); empty if none."""
        return _packaged_table(gpu)

    def kernel(self, op: str, inputs: Sequence[Layout]) -> str | None:
        """The kernel cuBLAS runs for the GEMM `op` ("aten.mm") on `inputs`, or None where not measured."""
        for size in sorted({d for shape, _, _ in inputs for d in shape}):
            family = self._families.get(_family_key(op, inputs, size))
            if family is not None and (kernel := family.kernel(size)) is not None:
                return kernel
        return None


@lru_cache(maxsize=None)
def _packaged_table(gpu: str) -> GemmKernelTable:
    res = resources.files("phantora").joinpath("data", gpu, "gemm_kernels.json")
    if not res.is_file():
        return GemmKernelTable()
    return GemmKernelTable.from_dict(json.loads(res.read_text()))
