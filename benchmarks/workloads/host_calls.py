"""Host time of a training step's library Python, measured the same way on a real GPU and in Phantora.

Used by the workload scripts when PHANTORA_BENCH_HOST_CALLS=DIR is set:
- FSDP2's hook methods, FSDP1's hooks and DTensor's Python entry points are wrapped, and each call's *exclusive* host
  time (perf_counter_ns, time in nested wrapped calls excluded) is recorded;
- each step is cut into phases (forward, loss, backward, clip, optimizer, zero_grad) by host timestamps,
  with no synchronisation, so a host-bound phase shows its host cost;
and rank R writes DIR/rank{R}.json = {"calls": {name: [µs, ...]}, "phases": [{phase: µs}, ...]} over
the steps after `start()`. Under Phantora the script's perf_counter reads the simulated host clock, so
a real run's file and a simulated run's file compare directly (benchmarks/fit_library_calls.py).
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import json
import os
import threading
import time

TARGETS = (
    ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState",
     ("_pre_forward", "_post_forward", "_root_post_backward_final_callback")),
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup",
     ("pre_backward", "post_backward", "unshard", "wait_for_unshard", "reshard")),
    ("torch.distributed.tensor._api", "DTensor", ("from_local", "to_local", "redistribute", "full_tensor")),
    ("torch.distributed.tensor.parallel.style", "ColwiseParallel", ("_prepare_input_fn", "_prepare_output_fn")),
    ("torch.distributed.tensor.parallel.style", "RowwiseParallel", ("_prepare_input_fn", "_prepare_output_fn")),
    # FSDP1: FullyShardedDataParallel.forward calls these by the names its module imported; the autograd hooks
    # are registered from _runtime_utils' own names
    ("torch.distributed.fsdp.fully_sharded_data_parallel", None, ("_root_pre_forward", "_pre_forward", "_post_forward")),
    ("torch.distributed.fsdp._runtime_utils", None,
     ("_pre_backward_hook", "_post_backward_hook", "_post_backward_final_callback")),
    # the host's waits for the GPU (FSDP1's limit on all-gathers in flight), apart from the Python around them
    ("torch.cuda", "Event", ("synchronize",)),
    ("torch.cuda", "Stream", ("synchronize",)),
)
"""(module, class or None for the module's own functions, names) whose calls are timed, as "Class.name" or
"module.name" (the module's last component); what a version of torch lacks is skipped."""

_calls: dict[str, list[float]] = collections.defaultdict(list)
_phases: list[dict[str, float]] = []
_local = threading.local()
_state = {"active": False, "step": None, "last": 0}


def _now() -> int:
    return time.perf_counter_ns()  # looked up per call: Phantora patches it


def _wrap(owner: type, attr: str, name: str) -> None:
    static = inspect.getattr_static(owner, attr)
    original = getattr(owner, attr)

    @functools.wraps(original)  # keeps the signature: distribute_module counts an input_fn's parameters
    def wrapper(*args, **kwargs):
        stack = _local.__dict__.setdefault("stack", [])
        start = _now()
        stack.append(0)
        try:
            return original(*args, **kwargs)
        finally:
            nested = stack.pop()
            took = _now() - start
            if stack:
                stack[-1] += took
            if _state["active"]:
                _calls[name].append(round((took - nested) / 1e3, 1))

    setattr(owner, attr, staticmethod(wrapper) if isinstance(static, staticmethod) else wrapper)


def install() -> list[str]:
    """Wrap every target this torch has (before the model is parallelized: TP styles bind their hooks then)."""
    wrapped = []
    for module_name, class_name, methods in TARGETS:
        try:
            module = importlib.import_module(module_name)
            owner = module if class_name is None else getattr(module, class_name)
        except (ImportError, AttributeError):
            continue
        prefix = class_name or module_name.rpartition(".")[2]
        for attr in methods:
            if hasattr(owner, attr):
                _wrap(owner, attr, f"{prefix}.{attr}")
                wrapped.append(f"{prefix}.{attr}")
    return wrapped


def start() -> None:
    """Record from now on (after the warm-up steps)."""
    _state["active"] = True


def step_begin() -> None:
    _state["step"] = collections.defaultdict(float)
    _state["last"] = _now()


def mark(phase: str) -> None:
    """The host finished `phase` of this step (phases of several micro-batches add up)."""
    if _state["step"] is None:
        return
    now = _now()
    _state["step"][phase] += (now - _state["last"]) / 1e3
    _state["last"] = now


def step_end() -> None:
    if _state["active"] and _state["step"] is not None:
        _phases.append({k: round(v, 1) for k, v in _state["step"].items()})
    _state["step"] = None


def dump(out_dir: str, rank: int) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"calls": _calls, "phases": _phases}, f)
