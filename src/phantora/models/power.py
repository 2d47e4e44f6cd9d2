"""Power cap: how a GPU's board power limit stretches its tensor-core work.

An H200 SXM may draw 700 W on average. A training step of a large model asks for more: its GEMMs
alone would draw 850 W at the full 1980 MHz clock. The driver then lowers the SM clock ("SW power
cap") until the average power, taken over about a second, is back at the limit. Memory-bound
kernels keep their speed (their time is the memory's); GEMMs and attention slow down. The model takes
a kernel's energy to be the same at any clock, fitted where the limit holds it down (the board's energy
counter shows it falls with the clock: docs/models/power.md, Known error), and works in energy:

- a kernel's energy is `pj_per_tensor_flop` x its tensor-core FLOPs (GEMM, attention) plus
  `pj_per_byte` x the device-memory bytes it moves;
- its *demanded* power is that energy over the duration the compute model gives it, which is
  the duration measured inside real training steps that ran at or just below the limit;
- each GPU averages the demanded power of the clocked kernels (GEMM, attention) and of the others over
  a sliding window of `window_s` (the energy of the kernels that started in it, over its length), as
  the driver's limit is defined; a GPU idle before the run starts with an empty window;
- while `idle_w` plus the average exceeds `cap_w`, clocked kernels run `stretch` times longer: by
  just enough that the clocked ones' power fits in what the unclocked ones leave.

The average holds demanded power, not the throttled power the GPU really draws, so the stretch is a
function of the workload and not a feedback loop: a stretched kernel adds its energy times its
stretch. NCCL kernels add nothing (their power was not measured apart).

A GPU's constants are in its profile (specs/<gpu>/power.json, the limit in profile.toml). The H200's
were fitted by benchmarks/power/fit.py on data/h200/power/nvml (4x H200, NVML every 2 ms): one GPU running
GEMMs, adds and mixes of them (idle 125 W at 1980 MHz; adding two 256 MiB bf16 tensors at 4.3 TB/s draws
641 W; 8192^3 bf16 GEMMs back to back 711 W), the training steps checking them. The 1.5B and 3B Llama steps that the kernel database was measured in average 634-697 W at an
SM clock of 1770-1870 MHz; the 8B FSDP2 step 682-689 W at 1560-1665 MHz, its backward slowing
layer after layer. The real controller cuts late in each second rather than evenly (the 8B's
last backward layers run at ~1400 MHz, its forward at ~1740); the model spreads the cut.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

CLOCKED_CLASSES = frozenset({"gemm", "attention"})
"""Kernel classes whose duration follows the SM clock (tensor-core bound)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PowerCap:
    """A GPU's board power limit and the energy its work costs."""

    cap_w: float
    """Board power limit (nvidia-smi "Current Power Limit")."""
    idle_w: float
    """Baseline power of a GPU under load beyond what its kernels' energies account for (clocks up, running
    nothing would draw less): what makes a measured step's kernels demand the power NVML read over it."""
    pj_per_tensor_flop: float
    """Energy per tensor-core FLOP (GEMM, attention)."""
    pj_per_byte: float
    """Energy per byte a kernel reads or writes in device memory."""
    window_s: float = 1.0
    """Length of the sliding window the limit's average is taken over."""
    max_stretch: float = 2.0
    """Slowest a clocked kernel gets (the clock's floor relative to the one the database was measured at)."""

    def __post_init__(self) -> None:
        if not 0 < self.idle_w < self.cap_w:
            raise ValueError(f"need 0 < idle_w < cap_w, got {self.idle_w} and {self.cap_w}")
        if self.pj_per_tensor_flop < 0 or self.pj_per_byte < 0 or self.window_s <= 0 or self.max_stretch < 1:
            raise ValueError(f"invalid power model {self}")

    def energy_j(self, kernel_class: str, flops: float, nbytes: float) -> float:
        """Energy of one kernel."""
        tensor = flops if kernel_class in CLOCKED_CLASSES else 0.0
        return (tensor * self.pj_per_tensor_flop + nbytes * self.pj_per_byte) * 1e-12


class GpuPower:
    """One GPU's average demanded power over the last `window_s`, and the stretch it sets for clocked kernels."""

    __slots__ = ("cap", "_window_ns", "_recent", "_clocked_w", "_other_w", "clocked_ns", "slowed_ns")

    def __init__(self, cap: PowerCap) -> None:
        self.cap = cap
        self._window_ns = round(cap.window_s * 1e9)
        self._recent: deque[tuple[int, float, float]] = deque()
        """(start, clocked W, other W) of the kernels in the window, oldest first."""
        self._clocked_w = 0.0
        self._other_w = 0.0
        self.clocked_ns = 0
        """Time of the clocked kernels placed so far, before the cap stretched them."""
        self.slowed_ns = 0
        """What the cap added to their time."""

    def _slide_to(self, t_ns: int) -> None:
        recent = self._recent
        while recent and recent[0][0] <= t_ns - self._window_ns:
            _, clocked_w, other_w = recent.popleft()
            self._clocked_w -= clocked_w
            self._other_w -= other_w
        if not recent:  # no rounding residue survives an empty window
            self._clocked_w = self._other_w = 0.0

    def stretch(self, t_ns: int) -> float:
        """Duration factor of a clocked kernel that starts at `t_ns`."""
        self._slide_to(t_ns)
        return self._stretch()

    def _stretch(self) -> float:
        budget = self.cap.cap_w - self.cap.idle_w - self._other_w
        if self._clocked_w <= budget:
            return 1.0
        if budget <= self._clocked_w / self.cap.max_stretch:
            return self.cap.max_stretch
        return self._clocked_w / budget

    def add(self, t_ns: int, kernel_class: str, energy_j: float, stretch: float = 1.0) -> None:
        """A kernel started at `t_ns` (with `stretch` applied if clocked): its demanded energy enters the average."""
        self._slide_to(t_ns)
        self._enter(t_ns, kernel_class in CLOCKED_CLASSES, energy_j * stretch)

    def _enter(self, t_ns: int, clocked: bool, energy_j: float) -> None:
        watts = energy_j / self.cap.window_s
        if clocked:
            self._recent.append((t_ns, watts, 0.0))
            self._clocked_w += watts
        else:
            self._recent.append((t_ns, 0.0, watts))
            self._other_w += watts

    def place(self, t_ns: int, kernel_class: str, flops: float, nbytes: float, duration_ns: int,
              chip_factor: float = 1.0) -> int:
        """A kernel of `duration_ns` at full speed starts at `t_ns`: its duration under the cap (longer only if
        clocked and over it); its energy joins the average. Called for every kernel: the window slides once.
        `chip_factor`: a clocked kernel runs on a chip this many times slower than the mean one at the same power
        (models/chip_variation.py), so it spends as many times the energy: its `duration_ns` holds the factor
        already, and the cap slows it as much as the mean chip's."""
        self._slide_to(t_ns)
        energy_j = self.cap.energy_j(kernel_class, flops, nbytes)
        if kernel_class not in CLOCKED_CLASSES:
            self._enter(t_ns, False, energy_j)
            return duration_ns
        stretch = self._stretch()
        self._enter(t_ns, True, energy_j * chip_factor * stretch)
        capped = duration_ns if stretch == 1.0 else round(duration_ns * stretch)
        self.clocked_ns += duration_ns
        self.slowed_ns += capped - duration_ns
        return capped

    def average_w(self) -> float:
        """Demanded board power averaged over the window, idle included (for reports and tests)."""
        return self.cap.idle_w + self._clocked_w + self._other_w
