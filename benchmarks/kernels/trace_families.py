"""A profiled step's ops of a few families, measured and costed by the compute model: a held-out check.

    python -m benchmarks.kernels.trace_families \
        data/h200/e2e/frameworks/profiles/torchtitan_deepseek_v3_debug_ep2.rank0.trace.json.gz [--gpu h200] [--analytic]

The trace is a PyTorch profiler Chrome trace recorded with shapes (TorchTitan's profiler records them; calls without
shapes are left out). Each call of a
family below is rebuilt as an `OpCall` from its recorded dims, strides and types, and compared: measured, the summed
durations of the GPU kernels its CPU span launched (the CUDA runtime calls on its thread inside the span, linked to
their kernels by correlation id); modelled, the shipped model's estimate (`--analytic`: the analytic model alone,
without the database), without and with its kernel gaps. Prints, per family, the calls and the sums per step. The
innermost call is taken where calls nest: a DTensor op is recorded with the global shapes around the op on the local
ones, and `index_put_` runs `_index_put_impl_`.

Families: `torch.cat` with a strided or expanded input (Note [Strided concatenation] in models/compute.py) and with
contiguous inputs; `index_put_` without and with accumulation (Note [index_put_'s two kernels]); the LayerNorm and
RMSNorm forwards and backwards (Notes [Norms pay per row] and [Norm backward's weight gradient]). A tensor list's
dtype is not recorded: a `cat`'s is read off its kernel's element size (OpaqueType<2> for 2 bytes). An
`index_put_`'s indices are not either: they are taken as int64, one per row of the values, one index tensor per
indexed dim (as many as the values have dims fewer than the target, plus one); a scalar written through a mask is
left out.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from phantora.models.compute import ComputeModel, KernelDatabase, is_contiguous
from phantora.models.ops import OpCall, TensorMeta
from phantora.specs import load_profile

TRACE_DTYPES = {"c10::BFloat16": "bfloat16", "float": "float32", "c10::Half": "float16", "double": "float64",
                "long int": "int64", "int": "int32", "bool": "bool"}
FAMILY_OPS = ("aten::cat", "aten::index_put_", "aten::_index_put_impl_", "aten::_fused_rms_norm",
              "aten::_fused_rms_norm_backward", "aten::native_layer_norm", "aten::native_layer_norm_backward")
OPAQUE_SIZE = re.compile(r"OpaqueType<(\d+)u?>")


@dataclass
class Call:
    """One innermost call of a family: its trace event and the kernels its span launched."""

    event: dict
    kernels: list[dict]


def contiguous(shape: list[int], dtype: str) -> TensorMeta:
    """A row-major tensor (written here, not imported, so that the script costs earlier versions of the model too)."""
    stride, acc = [], 1
    for n in reversed(shape):
        stride.insert(0, acc)
        acc *= n
    return TensorMeta(tuple(shape), dtype, tuple(stride), "cuda")


def tensor(args: dict, i: int, dtype: str | None = None) -> TensorMeta:
    return TensorMeta(tuple(args["Input Dims"][i]), dtype or TRACE_DTYPES[args["Input type"][i]],
                      tuple(args["Input Strides"][i]), "cuda")


def calls(events: list[dict]) -> list[Call]:
    """The innermost calls of FAMILY_OPS (index_put_ runs _index_put_impl_; a DTensor op, recorded with the global
    shapes, runs the local op), each with the kernels launched inside its CPU span on its thread."""
    kernels = {e["args"]["correlation"]: e for e in events
               if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and "correlation" in e.get("args", {})}
    runtime = defaultdict(list)
    for e in events:
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in kernels:
            runtime[e["tid"]].append(e)
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e["name"] in FAMILY_OPS),
                 key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    found: list[Call] = []
    for e, after in zip(ops, ops[1:] + [None]):
        end = e["ts"] + e["dur"]
        if after is not None and after["tid"] == e["tid"] and after["ts"] <= end:
            continue  # an outer call: the one inside it is taken
        launched = [kernels[r["args"]["correlation"]] for r in runtime[e["tid"]] if e["ts"] <= r["ts"] <= end]
        found.append(Call(e, launched))
    return found


def rebuild(call: Call) -> OpCall | None:
    """The `OpCall` Phantora's runtime would record for the call (Input Dims, Strides and types of its event); None
    for a call recorded without shapes, a `cat` of an empty list and a scalar written through a mask."""
    name, args = call.event["name"].removeprefix("aten::"), call.event["args"]
    if "Input Dims" not in args:
        return None  # recorded without shapes
    concrete = args.get("Concrete Inputs", [])
    if name == "cat":
        size = next((int(m[1]) for k in call.kernels if (m := OPAQUE_SIZE.search(k["name"]))), 2)
        dtype = {1: "int8", 2: "bfloat16", 4: "float32", 8: "int64"}[size]
        parts = [TensorMeta(tuple(d), dtype, tuple(s), "cuda")
                 for d, s in zip(args["Input Dims"][0], args["Input Strides"][0])]
        if not parts:
            return None
        dim = int(concrete[1]) % len(parts[0].shape)
        shape = list(parts[0].shape)
        shape[dim] = sum(t.shape[dim] for t in parts)
        return OpCall("aten.cat.default", (tuple(parts), dim), (), (contiguous(shape, dtype),))
    if name in ("index_put_", "_index_put_impl_"):
        target, values = tensor(args, 0), tensor(args, 2)
        if not values.shape:
            return None  # a scalar written through a mask (`x[mask] = 0`): its index is not recorded
        # one index tensor per indexed dim: the values' first dim runs over the indices, the rest over the dims after
        indices = (contiguous([values.shape[0]], "int64"),) * (len(target.shape) - len(values.shape) + 1)
        flags = tuple(c == "True" for c in concrete[3:])
        return OpCall(f"aten.{name}.default", (target, indices, values, *flags), (), (target,))
    if name in ("_fused_rms_norm", "native_layer_norm"):
        x = tensor(args, 0)
        normalized = list(ast.literal_eval(concrete[1]))
        stats = contiguous([*x.shape[:len(x.shape) - len(normalized)], *[1] * len(normalized)], "float32")
        rest = tuple(tensor(args, i) if args["Input Dims"][i] else None for i in range(2, len(args["Input Dims"]) - 1))
        outputs = (contiguous(list(x.shape), x.dtype), stats) + ((stats,) if name == "native_layer_norm" else ())
        return OpCall(f"aten.{name}.default", (x, normalized, *rest, float(concrete[-1] or 0.0)), (), outputs)
    # the backwards: (grad_out, input, normalized_shape, [mean,] rstd, weight, [bias,] output_mask)
    normalized = list(ast.literal_eval(concrete[2]))
    mask = list(ast.literal_eval(concrete[-1]))
    ins = [tensor(args, i) if args["Input Dims"][i] else None for i in range(len(args["Input Dims"]) - 1)]
    ins[2] = normalized
    x, weight = ins[1], ins[-1] if name == "_fused_rms_norm_backward" else ins[-2]
    outputs = tuple(t for t, keep in zip((contiguous(list(x.shape), x.dtype), weight, weight), mask) if keep and t)
    return OpCall(f"aten.{name}.default", (*ins, mask), (), outputs)


def family(op: OpCall) -> str:
    if op.name == "aten.cat.default":
        return "cat, strided or expanded" if not all(is_contiguous(t) for t in op.args[0]) else "cat, contiguous"
    if op.name.startswith(("aten.index_put_", "aten._index_put_impl_")):
        return "index_put, accumulate" if len(op.args) > 3 and op.args[3] else "index_put"
    return {"aten._fused_rms_norm.default": "RMSNorm forward", "aten._fused_rms_norm_backward.default": "RMSNorm backward",
            "aten.native_layer_norm.default": "LayerNorm forward"}.get(op.name, "LayerNorm backward")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--gpu", default="h200")
    p.add_argument("--analytic", action="store_true", help="the analytic model alone, not the database")
    args = p.parse_args()
    profile = load_profile(args.gpu)
    database = KernelDatabase(args.gpu) if args.analytic else profile.kernels.value
    model = ComputeModel(profile.spec, database, profile.calibration.value)
    gapless = ComputeModel(profile.spec, KernelDatabase(args.gpu), dataclasses.replace(model.cal, kernel_gap_ns=0.0))
    events = json.load(gzip.open(args.trace, "rt"))["traceEvents"]
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0])
    for call in calls(events):
        op = rebuild(call)
        if op is None:
            continue
        est = model.estimate(op)
        hit = model.database.lookup(op) if est.source == "measured" else None
        row = totals[family(op)]
        row[0] += 1
        row[1] += sum(k["dur"] for k in call.kernels) * 1e3
        row[2] += hit[0].kernel_ns if hit else gapless.analytic(op).duration_ns
        row[3] += est.duration_ns
        row[4] += hit is not None
    print(f"{args.trace.name}: {'analytic' if args.analytic else 'shipped database, then analytic'} ({args.gpu}); "
          "per step: measured kernel time, the model's without and with its kernel gaps")
    print(f"{'family':26s} {'calls':>5s} {'measured ms':>11s} {'model ms':>9s} {'ratio':>6s} {'with gaps':>9s} {'db hits':>7s}")
    for name, (n, measured, modelled, with_gaps, hits) in sorted(totals.items()):
        print(f"{name:26s} {n:5d} {measured / 1e6:11.2f} {modelled / 1e6:9.2f} {modelled / measured:6.2f} "
              f"{with_gaps / 1e6:9.2f} {hits:7d}")


if __name__ == "__main__":
    main()
