"""Host time of calls the host model charges beyond ops (models/host.py), read on the simulated clock.

Prints `HOST {json}`: the simulated host ns each probe took, for tests/integration/test_host_costs.py.
"""

import json
import pathlib
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

# imported under the simulation, as a training script's data pipeline imports it (runtime/python_costs.py hooks it)
from tokenizers import Tokenizer


def took(fn) -> int:
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


a = torch.ones(16, device="cuda")
b = torch.ones(16, device="cuda")
identity = torch.nn.Identity()
nested = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Sequential(torch.nn.Identity(), torch.nn.Identity()))
params = [torch.nn.Parameter(torch.ones(16, device="cuda")) for _ in range(3)]
opt = torch.optim.SGD(params, lr=0.1)
loader = iter(DataLoader(list(range(8)), batch_size=2, num_workers=0))
mask = torch.ones(2048, 2048, dtype=torch.bool)  # 4 MiB, kept fake on the host (runtime/dispatch.py)
tokens = torch.ones(16, 2048, dtype=torch.int64)  # 256 KiB, real
tokenizer = Tokenizer.from_file(str(pathlib.Path(__file__).parents[3] / "benchmarks/workloads/torchtitan/tokenizer.json"))
text = "A data pipeline tokenizes each document as it fills a sample, on the main thread. " * 20
x = torch.ones(8, device="cuda", requires_grad=True)
z = x.sin().sum()


class TimesTwo(torch.autograd.Function):
    """A custom Function: its backward is Python the engine calls (Megatron's layers are made of these)."""

    @staticmethod
    def forward(ctx, t):
        return t * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


y = torch.ones(8, device="cuda", requires_grad=True)
custom = TimesTwo.apply(y).sum()


def modules():
    for _ in range(100):
        identity(a)


def nested_modules():
    for _ in range(100):
        nested(a)


def adds():
    for _ in range(100):
        a.add_(b)


result = {
    "adds": took(adds),
    "modules": took(modules),
    "nested_modules": took(nested_modules),
    "global_module_hooks": int(bool(torch.nn.modules.module._has_any_global_hook())),
    "zero_grad": took(lambda: opt.zero_grad(set_to_none=True)),
    "optimizer_step": took(opt.step),  # no gradients: no ops, only the step's Python
    "clip": took(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0)),  # no gradients: no ops
    "next": took(lambda: next(loader)),
    "adds_after_next": took(adds),
    "adds_again": took(adds),
    "backward": took(z.backward),
    "custom_backward": took(custom.backward),
    # models/host.py Note [Tensor ops on the host]: a collate's stack, pin_memory, a view
    "stack_masks": took(lambda: torch.stack([mask, mask.clone()])),
    "stack_tokens": took(lambda: torch.stack([tokens, tokens + 1])),
    "pin_masks": took(lambda: mask.pin_memory()),
    "view_tokens": took(lambda: tokens.view(-1)),
    # models/host.py Note [Tensors from Python data]: per element stored; a numpy array's memory is shared, not stored
    "sample_ids": took(lambda: torch.LongTensor(list(range(4097)))),
    "batch_ids": took(lambda: torch.tensor([list(range(2048)), list(range(2048))])),
    "numpy_ids": took(lambda: torch.from_numpy(np.arange(4097))),
    # models/host.py Note [Tokenizing on the host]: per character read and token returned, a batch its texts' sum
    "tokenize": took(lambda: tokenizer.encode(text)),
    "tokenize_pair": took(lambda: tokenizer.encode(text, pair=text[:100])),
    "tokenize_batch": took(lambda: tokenizer.encode_batch([text, text[:100]])),
    "text_chars": len(text),
    "text_tokens": len(tokenizer.encode(text)),
    "pair_tokens": len(tokenizer.encode(text, text[:100])),
    "short_tokens": len(tokenizer.encode(text[:100])),
}
print("HOST " + json.dumps(result), flush=True)
