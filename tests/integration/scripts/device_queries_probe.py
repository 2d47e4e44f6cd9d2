"""C++'s device queries on fake tensors (csrc/device_queries.cpp, Note [Device queries in C++]): their answers,
and who is asked. Prints one PROBE line."""

import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from phantora.runtime import dispatch

DEVICE = torch.ops.prim.device.default
asked = {"hybrid_mode": 0}
answer = dispatch.HybridMode.__torch_dispatch__


def counting(self, func, types, args=(), kwargs=None):
    if func is DEVICE:
        asked["hybrid_mode"] += 1
    return answer(self, func, types, args, kwargs)


dispatch.HybridMode.__torch_dispatch__ = counting


class CountingMode(TorchDispatchMode):
    """A program's own mode above Phantora's: it must still be asked."""

    def __init__(self) -> None:
        super().__init__()
        self.device_queries = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.device_queries += func is DEVICE
        return func(*args, **(kwargs or {}))


x = torch.ones(4, 8, device="cuda", requires_grad=True)
w = torch.ones(3, 8, device="cuda:0")
y = torch.nn.functional.linear(x, w)  # argument parsing and autograd's input metadata ask C++ for devices
y.sum().backward()  # so does the autograd engine
seen = {"is_cuda": x.is_cuda, "is_cpu": x.is_cpu, "is_meta": x.is_meta, "grad_is_cuda": x.grad.is_cuda,
        "grad_device": str(x.grad.device), "hybrid_mode_asked": asked["hybrid_mode"]}
with CountingMode() as mode:
    seen["is_cuda_under_a_mode"] = x.is_cuda
seen["asked_the_programs_mode"] = mode.device_queries
print("PROBE " + json.dumps(seen), flush=True)
