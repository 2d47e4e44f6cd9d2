"""Time rebuilt ops on a real device: warm-up, then several timed calls, median.

Note: [Timing kernels, not launches]
The database holds each op's summed *kernel* time (the compute model adds the measured gap between
back-to-back kernels itself), so the default timer is the PyTorch profiler (CUPTI): every timed call
runs inside a `record_function` tag, each kernel/memcpy/memset the profiler reports is charged to the
CPU op that launched it (`FunctionEvent.kernels`), and an op's time is the sum over the tag's subtree.
Launch gaps, Python and the profiler's own overhead are outside kernels, so they never count, and we
also learn how many kernels the op launches. This is how the shipped H200 database was measured
(benchmarks/common/encode.py, there with the raw Kineto events), so new entries are comparable with it.
CUDA events around each call (`timer="events"`) are the fallback when a profiler build cannot see
kernels: they include launch latency and inter-kernel gaps (an upper bound; a few µs on small ops)
and report one kernel per op.
Before each timed call a 256 MiB buffer is zeroed ("cold": evicts the L2 of any current GPU — the
H200 has 60 MB — as the shipped microbenchmarks did); `cold=False` measures with inputs left in L2
by the previous call. The CPU timer (`device="cpu"`) wall-times calls with perf_counter; it exists so
the pipeline can be tested without a GPU, and its numbers mean nothing for a GPU.
Large power-bound GEMMs (~4 ms, the llama's LM head) vary by about ±10% with the GPU's thermal and
power state: 3.9-4.1 ms from a fresh process, 4.5-4.6 ms after a second of back-to-back GEMMs, 3.4-3.8
ms inside the real training step (data/h200/kernels/profile_check/README.md); there is no warm-up that
removes this, so we do not try.
"""

from __future__ import annotations

import gc
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import torch

from phantora.models.ops import OpCall
from phantora.profiler.rebuild import RebuildError, RebuiltOp, rebuild

_OOM = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
TAG = "phantora-profile|"
NOT_STARTED = "not started: time limit reached"
Timer = Literal["profiler", "events", "cpu"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasureConfig:
    """How ops are timed."""

    device: str = "cuda:0"
    """Where to measure: a CUDA device, or "cpu" (tests only: wall time of CPU kernels)."""
    warmup: int = 3
    """Untimed calls before the timed ones (kernel selection, caches, lazy module loading)."""
    repeat: int = 5
    """Timed calls; the op's time is their median."""
    cold: bool = True
    """Evict the L2 before each timed call (Note [Timing kernels, not launches])."""
    timer: Timer | None = None
    """"profiler" (default on CUDA), "events" (CUDA events, includes launch gaps) or "cpu" (the CPU device)."""
    flush_bytes: int = 256 << 20
    chunk: int = 32
    """Ops per profiler session (bounds the events held in memory)."""

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.repeat < 1:
            raise ValueError(f"need --warmup >= 0 and --repeat >= 1, got {self.warmup} and {self.repeat}")
        if self.chunk < 1:
            raise ValueError("chunk must be at least 1")
        kind = torch.device(self.device).type
        if kind not in ("cuda", "cpu"):
            raise ValueError(f"cannot measure on device {self.device!r}: use cuda[:N] or cpu")
        timer = self.timer or ("cpu" if kind == "cpu" else "profiler")
        if (timer == "cpu") != (kind == "cpu"):
            raise ValueError(f"timer {timer!r} does not time device {self.device!r}")
        object.__setattr__(self, "timer", timer)

    @property
    def origin(self) -> str:
        """The database origin of entries measured this way (models.compute.ORIGIN_PRIORITY)."""
        return "micro_cold" if self.cold else "micro_hot"


@dataclass(frozen=True, slots=True)
class Measurement:
    kernel_ns: int
    """Median over the timed calls of the op's summed kernel time."""
    n_kernels: int
    """Median number of kernels (and memcpys/memsets) per call; 1 when the timer cannot tell."""
    samples_ns: tuple[int, ...]
    kernels: tuple[str, ...] = ()
    """Names of the kernels one timed call launched, in launch order (the profiler timer only)."""


TagKernels = tuple[int, int, tuple[str, ...]]
"""One timed call's summed kernel ns, kernel count and kernel names (`tag_kernel_times`)."""


class ProfilerAttributionError(RuntimeError):
    """The profiler reported no kernels for ops that certainly launch some (its output format is
    not the one this code reads): never turn that into zero-time entries."""


Done = Callable[[int, "Measurement | None", str], None]
"""Called once per op, in order: (index, measurement or None, reason when None)."""


class Measurer:
    """Measures ops one after another on one device."""

    def __init__(self, config: MeasureConfig) -> None:
        self.config = config
        self.device = torch.device(config.device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA GPU is available (torch.cuda.is_available() is False)")
            torch.cuda.set_device(self.device)
            self._flush = torch.empty(config.flush_bytes // 4, dtype=torch.int32, device=self.device)
        else:
            self._flush = None

    def device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return "cpu"

    def measure(self, ops: Sequence[OpCall], done: Done, *, stop: Callable[[], bool] | None = None) -> None:
        """Measure `ops` in order, calling `done` once for each; once `stop()` is true, the ops not yet
        started are reported with the reason `NOT_STARTED`."""
        step = self.config.chunk if self.config.timer == "profiler" else 1
        for start in range(0, len(ops), step):
            if stop is not None and stop():
                for i in range(start, len(ops)):
                    done(i, None, NOT_STARTED)
                return
            chunk = ops[start:start + step]
            if self.config.timer == "profiler":
                self._profile_chunk(chunk, start, done)
            else:
                self._time_one(chunk[0], start, done)

    # -- helpers -----------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _prepare(self, op: OpCall) -> RebuiltOp:
        call = rebuild(op, self.device)
        for _ in range(self.config.warmup):
            call.run()
        self._sync()
        return call

    def _evict(self) -> None:
        if self._flush is not None and self.config.cold:
            self._flush.zero_()

    def _failed(self, error: BaseException) -> str:
        if isinstance(error, RebuildError):
            return f"cannot rebuild: {error}"
        if isinstance(error, _OOM):
            self._release()
            return "out of memory"
        first = (str(error).strip().splitlines() or [""])[0][:200]
        return f"failed to run: {type(error).__name__}: {first}"

    def _release(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- timers ------------------------------------------------------------------------------
    def _time_one(self, op: OpCall, index: int, done: Done) -> None:
        try:
            call = self._prepare(op)
            samples = []
            for _ in range(self.config.repeat):
                self._evict()
                if self.config.timer == "events":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    call.run()
                    end.record()
                    end.synchronize()
                    samples.append(round(start.elapsed_time(end) * 1e6))
                else:
                    t0 = time.perf_counter_ns()
                    call.run()
                    samples.append(time.perf_counter_ns() - t0)
            del call
        except Exception as error:  # noqa: BLE001 - one op's failure is listed, the others go on
            done(index, None, self._failed(error))
            return
        done(index, Measurement(round(statistics.median(samples)), 1, tuple(samples)), "")

    def _profile_chunk(self, chunk: Sequence[OpCall], offset: int, done: Done) -> None:
        from torch.profiler import ProfilerActivity, profile, record_function

        failures: dict[int, str] = {}
        ran: list[int] = []
        with warnings.catch_warnings():
            # torch 2.11 warns that the profiler clears events at the end of each cycle: we read them before
            warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for j, op in enumerate(chunk):
                    call = None
                    try:
                        call = self._prepare(op)
                        for r in range(self.config.repeat):
                            self._evict()
                            with record_function(f"{TAG}{j}|{r}"):
                                call.run()
                        self._sync()
                        ran.append(j)
                    except Exception as error:  # noqa: BLE001 - listed with its reason
                        failures[j] = self._failed(error)
                    finally:
                        del call
                self._sync()
            times = tag_kernel_times(prof.events())
        self._report_chunk(chunk, offset, done, times, failures, ran)

    def _report_chunk(self, chunk: Sequence[OpCall], offset: int, done: Done, times: dict[tuple[int, int], TagKernels],
                      failures: dict[int, str], ran: list[int]) -> None:
        working = [j for j in ran if _launches_work(chunk[j])]
        if len(working) >= 2 and not any(times.get((j, r), (0, 0, ()))[1] for j in working
                                         for r in range(self.config.repeat)):
            raise ProfilerAttributionError(
                "the profiler attributed no GPU kernel to any measured op; this PyTorch's profiler output "
                "is not understood here: rerun with --timer events")
        for j, op in enumerate(chunk):
            if j in failures:
                done(offset + j, None, failures[j])
                continue
            reps = [times.get((j, r)) for r in range(self.config.repeat)]
            if any(x is None for x in reps):
                done(offset + j, None, "the profiler lost some of its timed calls")
                continue
            samples = [ns for ns, _, _ in reps]  # type: ignore[misc]
            counts = sorted(n for _, n, _ in reps)  # type: ignore[misc]
            if counts[-1] == 0:  # never store a zero-time entry we cannot vouch for (Note above)
                done(offset + j, None, "the profiler saw no GPU kernel for this op")
                continue
            done(offset + j, Measurement(round(statistics.median(samples)), counts[(len(counts) - 1) // 2],
                                         tuple(samples), reps[0][2]), "")  # type: ignore[index]
        self._release()


def _launches_work(op: OpCall) -> bool:
    return any(o.numel > 0 for o in op.outputs) or any(t.numel > 0 for t in op.tensor_inputs())


def tag_kernel_times(events) -> dict[tuple[int, int], TagKernels]:
    """(op index, rep) -> (summed kernel ns, kernel count, kernel names by start) for every `TAG` range in the
    profiler's events: the kernels of the tag's CPU subtree (Note [Timing kernels, not launches])."""
    cpu = torch.autograd.DeviceType.CPU
    out: dict[tuple[int, int], TagKernels] = {}
    for e in events:
        name = e.name
        if not name.startswith(TAG) or e.device_type != cpu:
            continue
        try:
            j, r = (int(x) for x in name[len(TAG):].split("|"))
        except ValueError:
            continue
        total_us = 0.0
        launched = []
        stack = [e]
        while stack:
            node = stack.pop()
            for i, k in enumerate(node.kernels):
                if k.name.startswith(TAG):  # the tag's own GPU-side annotation range
                    continue
                total_us += k.duration
                launched.append((node.time_range.start, i, k.name))
            stack.extend(node.cpu_children)
        out[(j, r)] = (round(total_us * 1000), len(launched), tuple(name for *_, name in sorted(launched)))
    return out
