"""Per-op selective activation checkpointing's Python costs the host (models/python_prices.py Note [Library Python]):
the same layers' checkpointed forward with and without a selective policy, timed by the program's own clock, and what
its caching dispatch mode costs a call. Prints one PROBE line."""

import functools
import inspect
import json
import time

import torch
from torch.utils.checkpoint import (CheckpointPolicy, _CachingTorchDispatchMode, checkpoint,
                                    create_selective_checkpoint_contexts)

from phantora.runtime.python_prices import site_relative
from phantora.specs.profile import load_profile

LAYERS = 4
layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(LAYERS)]).cuda()
x = torch.randn(64, 256, device="cuda", requires_grad=True)


def recompute_all(ctx, func, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.PREFER_RECOMPUTE


def forward_ns(selective: bool) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    context = functools.partial(create_selective_checkpoint_contexts, recompute_all) if selective else None
    y = checkpoint(layers, x, use_reentrant=False, **({"context_fn": context} if selective else {}))
    took = (time.perf_counter() - start) * 1e9
    y.sum().backward()
    return took


for _ in range(2):  # first calls: GEMM selection, the kernels' first launches
    forward_ns(True), forward_ns(False)
selective_ns, full_ns = forward_ns(True), forward_ns(False)
code = inspect.unwrap(_CachingTorchDispatchMode.__torch_dispatch__).__code__
prices = load_profile("h200").python_prices.value
dispatch_ns = prices.price_ns(site_relative(code.co_filename), code.co_firstlineno, code.co_name)
print("PROBE " + json.dumps({"selective_ns": selective_ns, "full_ns": full_ns, "dispatch_ns": dispatch_ns,
                             "layers": LAYERS}))
