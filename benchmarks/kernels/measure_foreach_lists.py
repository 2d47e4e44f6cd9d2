"""How a foreach op's kernels depend on its list: launches, blocks and time, on a real GPU.

An optimizer's foreach ops run `multi_tensor_apply`, which cuts each tensor into chunks, gives each chunk a
thread block, and launches a kernel whenever a launch's blocks or tensors are full. How many launches a list
takes, and how long each runs, decide the op's time; the lists an optimizer sees differ with how a framework
shards parameters: FSDP1's flat parameter gives a few views, one as large as the embedding; FSDP2 one shard
per parameter. Each list below holds the 1.5B Llama's parameters as one rank of four sees them (the shapes
Phantora's simulation of those programs records), in fp32, and each op of AdamW's foreach step runs on it under
PyTorch's profiler (launches, the blocks of each launch) and timed alone with CUDA events.

    python3 benchmarks/kernels/measure_foreach_lists.py --out foreach_lists.json      # on a GPU
    python -m benchmarks.kernels.measure_foreach_lists --compare data/h200/kernels/foreach_lists/foreach_lists.json

`--compare` prints each measured op beside what Phantora's compute model gives it (no GPU needed).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from typing import Any, Callable

import torch

DIM, FFN, VOCAB, KV, LAYERS = 2048, 8192, 128256, 512, 16
LAYER = [DIM * DIM, KV * DIM, KV * DIM, DIM * DIM, FFN * DIM, FFN * DIM, DIM * FFN, DIM, DIM]
"""A layer's parameters (q, k, v, o, w1, w3, w2, two norms), in elements."""


def fsdp2_shards(world: int = 4) -> list[int]:
    """FSDP2: each parameter sharded on dim 0, this rank's piece of each."""
    params = [VOCAB * DIM, *LAYER * LAYERS, DIM, VOCAB * DIM]
    return [-(-n // world) for n in params]


def fsdp1_views(world: int = 4) -> list[int]:
    """FSDP1 with use_orig_params, one unit: rank 0's shard of the flat parameter, as the views of the parameters
    that fall in it (the embedding first, then layer by layer, the last one cut)."""
    params = [VOCAB * DIM, *LAYER * LAYERS, DIM, VOCAB * DIM]
    room, views = -(-sum(params) // world), []
    for n in params:
        views.append(min(n, room))
        room -= views[-1]
        if room == 0:
            break
    return views


LISTS = {"fsdp1_views": fsdp1_views(), "fsdp2_shards": fsdp2_shards(),
         "one_tensor": [sum(fsdp2_shards())], "fsdp1_views_without_embedding": fsdp1_views()[1:]}


ADAMW_STEP = (
    ("_foreach_mul_", "Scalar", ("params", 0.99), None),
    ("_foreach_lerp_", "Scalar", ("m", "grads", 0.1), None),
    ("_foreach_addcmul_", "Scalar", ("v", "grads", "grads", 0.001), None),
    ("_foreach_sqrt", "default", ("v",), "m"),
    ("_foreach_div_", "ScalarList", ("v", "scalars"), None),
    ("_foreach_add_", "Scalar", ("v", 1e-8), None),
    ("_foreach_addcdiv_", "ScalarList", ("params", "m", "v", "scalars"), None),
)
"""AdamW's foreach step, op by op (torch/optim/adamw.py's _multi_tensor path): (op, overload, arguments, the list
shaped like its output or None for an in-place op). A name stands for a list: the parameters, gradients, first and
second moments, or one scalar per tensor; numbers are passed as they are."""


def arguments(spec: tuple, lists: dict[str, Any]) -> tuple:
    return tuple(lists[a] if isinstance(a, str) else a for a in spec)


def compare(path: str, gpu: str = "h200") -> None:
    """Each measured op beside the compute model's estimate of it (the same lists, as OpCalls)."""
    from phantora.models.compute import ComputeModel, KernelDatabase
    from phantora.models.ops import OpCall, TensorMeta
    from phantora.specs import load_profile

    profile = load_profile(gpu)
    model = ComputeModel(profile.spec, KernelDatabase(gpu), profile.calibration.value)
    measured = json.loads(open(path).read())
    for name, entry in measured["lists"].items():
        sizes = entry["sizes"]
        lists: dict[str, Any] = {key: tuple(TensorMeta((n,), "float32", (1,)) for n in sizes)
                                 for key in ("params", "grads", "m", "v")}
        lists["scalars"] = (0.5,) * len(sizes)
        for op, overload, spec, output in ADAMW_STEP:
            call = OpCall(f"aten.{op}.{overload}", arguments(spec, lists), (), lists[output] if output else ())
            real = entry["ops"][op]["us"]
            predicted = model.estimate(call).duration_ns / 1e3
            print(f"{name:30} {op:18} measured {real:8.1f} µs  model {predicted:8.1f} µs  "
                  f"{100 * (predicted / real - 1):+6.1f} %")


def ops(lists: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Each op of ADAMW_STEP as a call on these lists (the GPU's tensors)."""
    return {op: functools.partial(getattr(torch, op), *arguments(spec, lists)) for op, _, spec, _ in ADAMW_STEP}


def kernel_blocks(run, path: str) -> list[int]:
    """Each launch's blocks, from a Chrome trace of one call."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return [e["args"]["grid"][0] for e in events
            if e.get("cat") == "kernel" and "multi_tensor_apply" in e.get("name", "")]


def timed_us(run, repeat: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="measure on this machine's GPU into this file")
    p.add_argument("--compare", help="a measured file: print it beside the compute model")
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    if a.compare:
        compare(a.compare)
        return
    if not a.out:
        p.error("give --out (measure) or --compare (print)")
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda, "lists": {}}
    for name, sizes in LISTS.items():
        lists: dict[str, Any] = {key: [torch.rand(n, device="cuda") for n in sizes]
                                 for key in ("params", "grads", "m", "v")}
        lists["scalars"] = [0.5] * len(sizes)
        rows = {}
        for op, run in ops(lists).items():
            run()  # warm
            blocks = kernel_blocks(run, f"/tmp/foreach_{name}_{op}.json")
            rows[op] = {"launches": len(blocks), "blocks": sum(blocks), "max_blocks": max(blocks, default=0),
                        "us": round(timed_us(run, a.repeat), 1)}
            print(name, op, rows[op], flush=True)
        results["lists"][name] = {"sizes": sizes, "elements": sum(sizes), "ops": rows}
        del lists
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
