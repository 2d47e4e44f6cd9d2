"""When each layer of a training step ran, on the host and on the GPU, without a profiler's slowdown.

Used by the workload scripts when PHANTORA_BENCH_TIMELINE=DIR is set. At marked points of a step the
host time (perf_counter_ns) is taken and a CUDA event is recorded:
- each layer's forward start and end (module hooks that run before FSDP2's own hooks),
- each layer's backward start (a hook on the layer output's gradient; the backward of layer i ends
  where the backward of layer i-1 starts),
- the step's phases (forward, loss, backward, clip, optimizer, zero_grad; llama_train.py's mark()),
- with FSDP2, after each unshard: one event on the all-gather copy-in stream and one on the all-gather
  stream, so the copy-in's and the all-gather's completion times on the GPU are known.
Times are relative to the step's start: the host time right after the step's opening synchronize, and
an event recorded then on the current stream. Rank R writes DIR/rank{R}.json =
{"steps": [[[label, host_us, gpu_us], ...], ...], "gc": [{"us", "collections": [gen0, gen1, gen2]}, ...]}
over the recorded steps ("gc": host time in Python's garbage collector per step; "notes": what the
workload passed to note() during each step). With PHANTORA_BENCH_SCHED=1 (real runs only) each step
also gets "sched": the main thread's scheduler counters over the step (/proc/thread-self/sched: time on
a CPU, time waiting for one, switches, migrations) and, after the step's closing synchronize, two host
speed probes (a fixed pure-Python loop; 200 small kernel launches): is a slow rank's host slow at
everything, or waiting for a CPU? With it the file also gets "threads": each thread of the process (name, CPU
seconds) over the recorded steps and their wall time: does a helper thread (NCCL's, the process group's
watchdog) burn a CPU beside the main one? Under Phantora,
perf_counter reads the simulated host clock and events are simulated, so a real run's file and a
simulated run's file compare directly (benchmarks/e2e/compare_timeline.py).

With PHANTORA_BENCH_MARK_AB=1 (real runs) the recorded steps alternate between marking nothing and marking as
usual (from the first recorded step: off, on, off, ...), and the file gets "marked_steps": which step indices
were marked. The script's own step times then tell what the marks cost in situ (benchmarks/host/mark_cost.py).

A mark costs a real host 30-50 µs in situ (a new event and its record: data/h200/host/marks/in_situ/, benchmarks/host/mark_cost.py;
8 µs in a tight loop); the simulation charges it nothing, so fits on stretches between marks take it off.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import time

import torch

_state: dict = {"active": False, "step": None, "gc_start": 0, "gc_us": 0.0, "gc_runs": [0, 0, 0],
                "notes": {}, "sched": None, "threads": None}
_steps: list[list[list]] = []
_gc_steps: list[dict] = []
_note_steps: list[dict] = []
_sched_steps: list[dict] = []
_wall_starts: list[float] = []
"""time.time() at each recorded step's start: lines the steps up with samples taken outside the process."""
_SCHED = os.environ.get("PHANTORA_BENCH_SCHED") == "1"
_MARK_AB = os.environ.get("PHANTORA_BENCH_MARK_AB") == "1"
_marked_steps: list[int] = []
_SCHED_KEYS = ("se.sum_exec_runtime", "se.statistics.wait_sum", "se.statistics.wait_count", "nr_switches",
               "nr_voluntary_switches", "nr_involuntary_switches", "se.nr_migrations")


def _sched_counters() -> dict:
    """The main thread's scheduler counters (ms for times; absent keys where schedstats are off)."""
    counters = {}
    try:
        with open("/proc/thread-self/sched") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in _SCHED_KEYS:
                    counters[key.strip()] = float(value)
        with open("/proc/thread-self/stat") as f:
            counters["cpu"] = int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        pass
    return counters


def _threads_cpu_s() -> dict[str, tuple[str, float]]:
    """Thread id -> (name, CPU seconds so far) for every thread of this process (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            threads[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError, IndexError):
            continue
    return threads


def python_loop_probe_us() -> float:
    """A fixed pure-Python loop timed right now (µs): the host's speed at Python (4.4-5.3 ms on an uncontended H200
    machine's host, 6.5-10.5 ms contended: data/h200/host/leases/README.md)."""
    t0 = time.perf_counter_ns()
    total = 0
    for i in range(100_000):
        total += i * i
    return round((time.perf_counter_ns() - t0) / 1e3, 1)


def host_probes() -> dict:
    """Fixed host work timed right now: a pure-Python loop and 200 small kernel launches (µs)."""
    python_loop_us = python_loop_probe_us()
    x = torch.ones(256, device="cuda")
    torch.cuda.synchronize()
    t2 = time.perf_counter_ns()
    for _ in range(200):
        x = x + 1
    t3 = time.perf_counter_ns()
    torch.cuda.synchronize()
    return {"python_loop_us": python_loop_us, "launch_200_us": round((t3 - t2) / 1e3, 1)}


def note(key: str, value) -> None:
    """Keep `value` under `key` in this step's notes (a list per key)."""
    if _state["step"] is not None:
        _state["notes"].setdefault(key, []).append(value)


def _on_gc(phase: str, info: dict) -> None:
    """Python's cyclic garbage collector pauses the host: how long, per step and generation."""
    if phase == "start":
        _state["gc_start"] = time.perf_counter_ns()
    elif _state["gc_start"]:
        _state["gc_us"] += (time.perf_counter_ns() - _state["gc_start"]) / 1e3
        _state["gc_runs"][info["generation"]] += 1
        _state["gc_start"] = 0


def _record(label: str, stream: "torch.cuda.Stream | None" = None) -> None:
    if _state["step"] is None:
        return
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream) if stream is not None else event.record()
    _state["step"].append((label, time.perf_counter_ns(), event))


def install(layers) -> None:
    """Time each of `layers` (modules called once per forward, in order) and FSDP2's unshards."""
    for index, layer in enumerate(layers):
        _hook_layer(layer, index)
    _hook_fsdp_unshard()
    gc.callbacks.append(_on_gc)


def _hook_layer(layer: torch.nn.Module, index: int) -> None:
    def before(module, args):
        _record(f"L{index}.fwd")

    def after(module, args, output):
        _record(f"L{index}.fwd_end")
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda grad: _record(f"L{index}.bwd"))

    layer.register_forward_pre_hook(before, prepend=True)
    layer.register_forward_hook(after, prepend=True)


def _hook_fsdp_unshard() -> None:
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    except ImportError:
        return
    original = FSDPParamGroup.unshard

    @functools.wraps(original)
    def unshard(self, *args, **kwargs):
        pending = self._all_gather_result is not None
        result = original(self, *args, **kwargs)
        if not pending and self._all_gather_result is not None and self._all_gather_result.all_gather_work is None:
            name = self._module_fqn or "root"
            streams = self.comm_ctx
            if hasattr(streams, "all_gather_copy_in_stream"):
                _record(f"{name}.copy_in_done", streams.all_gather_copy_in_stream)
                _record(f"{name}.all_gather_done", streams.all_gather_stream)
        return result

    FSDPParamGroup.unshard = unshard


def step_begin(step: int | None = None, first_recorded: int = 3) -> None:
    """Call right after the step's opening synchronize; with `step`, recording starts at `first_recorded`
    (after the warm-up steps)."""
    if step is not None and step >= first_recorded:
        _state["active"] = True
    if not _state["active"]:
        return
    if _MARK_AB:
        if step is None or (step - first_recorded) % 2 == 0:
            return  # an unmarked step: every mark returns at once
        _marked_steps.append(step)
    if _SCHED and _state["threads"] is None:
        _state["threads"] = (time.time(), _threads_cpu_s())
    _state["step"] = []
    _wall_starts.append(time.time())
    _state["gc_us"], _state["gc_runs"] = 0.0, [0, 0, 0]
    _state["notes"] = {}
    _state["sched"] = _sched_counters() if _SCHED else None
    _record("step")


def mark(phase: str) -> None:
    """The host finished `phase` of this step."""
    _record(phase)


def step_end() -> None:
    """Call after the step's closing synchronize: turns the events into GPU times."""
    marks, _state["step"] = _state["step"], None
    if not marks:
        return
    _, host0, event0 = marks[0]
    _steps.append([[label, round((host - host0) / 1e3, 1), round(event0.elapsed_time(event) * 1e3, 1)]
                   for label, host, event in marks])
    _gc_steps.append({"us": round(_state["gc_us"], 1), "collections": list(_state["gc_runs"])})
    _note_steps.append(_state["notes"])
    if _state["sched"] is not None:
        before, after = _state["sched"], _sched_counters()
        delta = {key: round(after[key] - before[key], 3) for key in after if key in before and key != "cpu"}
        delta["cpu_begin"], delta["cpu_end"] = before.get("cpu"), after.get("cpu")
        _sched_steps.append({**delta, **host_probes()})


def dump(out_dir: str, rank: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    threads = {}
    if _state["threads"] is not None:
        start, before = _state["threads"]
        threads = {"threads_wall_s": round(time.time() - start, 3),
                   "threads": [{"tid": tid, "name": name, "cpu_s": round(cpu - before.get(tid, (name, 0.0))[1], 3)}
                               for tid, (name, cpu) in sorted(_threads_cpu_s().items())]}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"steps": _steps, "gc": _gc_steps, "notes": _note_steps, "sched": _sched_steps,
                   "wall_start_s": _wall_starts, **({"marked_steps": _marked_steps} if _MARK_AB else {}), **threads}, f)
