"""Shared helpers for the H200 measurement scripts (run on the GPU machine, torch 2.11+cu130).

The measurement idea: run real CUDA code under a recording `TorchDispatchMode` that sees the
same ops Phantora's runtime sees (below autograd and autocast, after CompositeImplicitAutograd
decomposition), wrap each op in a `record_function` tag, and run it all under
`torch.profiler`. Every GPU kernel (and memcpy/memset) the profiler records is linked to the
innermost CPU op that launched it; that op lies inside exactly one tag, so every kernel is
charged to the op Phantora would see. The op's "inclusive" time is the sum of its kernels.

Records are written as JSON lines, one op each, its values in Phantora's one encoding of an `OpCall`
(`phantora.models.opcall.encode_value`; the call's name under "name"); `phantora.models.opcall.decode_op`
decodes them back into the `OpCall`s the runtime builds. Older files wrote floats as {"f": x}, dtypes as
{"dtype": name}, devices as {"device": type}: the decoder reads those too.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import time
from collections import defaultdict
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

from phantora.models.opcall import encode_value
from phantora.models.ops import TensorMeta

TAG = "ph|"


def _op_value(v: Any) -> Any:
    """A real call's value as the runtime's `OpCall` holds it (a tensor as its `TensorMeta`)."""
    if isinstance(v, torch.Tensor):
        return TensorMeta(tuple(v.shape), str(v.dtype).removeprefix("torch."), tuple(v.stride()), v.device.type,
                          v.storage_offset())
    if isinstance(v, (list, tuple)):
        return tuple(_op_value(x) for x in v)
    if isinstance(v, torch.device):
        return v.type
    return v


def enc(v: Any) -> Any:
    """Phantora's own encoding of an `OpCall` value (models/opcall.py), so a measured op decodes as the runtime's."""
    return encode_value(_op_value(v))


class RecordMode(TorchDispatchMode):
    """Records every op (name, encoded args/kwargs/outputs) and tags it for the profiler."""

    def __init__(self, recorder: "Recorder", ctx: str):
        super().__init__()
        self.rec = recorder
        self.ctx = ctx

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        i = len(self.rec.ops)
        entry = {"id": i, "ctx": self.ctx, "name": str(func), "args": enc(args),
                 "kwargs": [[k, enc(v)] for k, v in sorted(kwargs.items())]}
        self.rec.ops.append(entry)
        t0 = time.perf_counter_ns()
        with record_function(f"{TAG}{i}"):
            out = func(*args, **kwargs)
        entry["wall_ns"] = time.perf_counter_ns() - t0
        outs = out if isinstance(out, (list, tuple)) else (out,)
        entry["outputs"] = [enc(o) for o in outs if isinstance(o, torch.Tensor)
                            or (isinstance(o, (list, tuple)) and o and isinstance(o[0], torch.Tensor))]
        return out


class Recorder:
    def __init__(self):
        self.ops: list[dict] = []

    def mode(self, ctx: str) -> RecordMode:
        return RecordMode(self, ctx)


def new_profile():
    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return profile(activities=acts, record_shapes=False, with_stack=False)


def attach_kernels(prof, recorder: Recorder, kname_ids: dict[str, int], raw_dump_path: str | None = None):
    """Fill entry["k"] = [[kernel_name_id, start_ns, dur_ns], ...] and entry["cpu_ns"] for every
    recorded op whose tag was seen. Returns (attributed_ns, unattributed_ns)."""
    events = prof.profiler.kineto_results.events()
    if raw_dump_path:
        with gzip.open(raw_dump_path, "wt") as f:
            for e in events:
                f.write(json.dumps([e.name()[:200], str(e.device_type()), e.start_thread_id(), e.start_ns(), e.duration_ns(),
                                    e.correlation_id(), e.linked_correlation_id()]) + "\n")
    cpu_by_thread: dict[int, list] = defaultdict(list)
    tags_by_thread: dict[int, list] = defaultdict(list)
    corr_to_cpu = {}  # torch op / annotation id -> (thread, start)
    runtime_by_corr = {}  # CUDA runtime call (cudaLaunchKernel...) CUPTI correlation -> (thread, start)
    device = []
    for e in events:
        name = e.name()
        if e.device_type() == torch.autograd.DeviceType.CPU:
            kind = str(getattr(e, "activity_type", lambda: "")())
            if "runtime" in kind or "driver" in kind or (name.startswith("cu") and "::" not in name):
                runtime_by_corr[e.correlation_id()] = (e.start_thread_id(), e.start_ns())
                continue
            if name.startswith(TAG) and e.is_user_annotation():
                tags_by_thread[e.start_thread_id()].append((e.start_ns(), e.end_ns(), int(name[len(TAG):])))
            corr_to_cpu[e.correlation_id()] = (e.start_thread_id(), e.start_ns())
        else:
            if name.startswith(TAG):
                continue  # gpu_user_annotation spans
            device.append(e)
    starts = {}
    for th, lst in tags_by_thread.items():
        lst.sort()
        starts[th] = [s for s, _, _ in lst]
    ops = recorder.ops
    for th, lst in tags_by_thread.items():
        for s, en, i in lst:
            if i < len(ops):
                ops[i]["cpu_ns"] = en - s
                ops[i].setdefault("k", [])

    def tag_of(th, t):
        lst = tags_by_thread.get(th)
        if not lst:
            return None
        j = bisect.bisect_right(starts[th], t) - 1
        if j >= 0 and lst[j][0] <= t <= lst[j][1]:
            return lst[j][2]
        return None

    attributed = unattributed = 0
    for e in device:
        c = corr_to_cpu.get(e.linked_correlation_id())
        i = tag_of(*c) if c else None
        if i is None:  # fall back to the launching runtime call
            c = runtime_by_corr.get(e.correlation_id())
            i = tag_of(*c) if c else None
        dur = e.duration_ns()
        if i is None or i >= len(ops):
            unattributed += dur
            continue
        kn = e.name()
        kid = kname_ids.setdefault(kn, len(kname_ids))
        ops[i].setdefault("k", []).append([kid, e.start_ns(), dur])
        attributed += dur
    return attributed, unattributed


def write_jsonl_gz(path: str, header: dict, rows) -> None:
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(header) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")


def out_dir() -> str:
    d = os.environ.get("OUT", "/tmp/phout")
    os.makedirs(d, exist_ok=True)
    return d
