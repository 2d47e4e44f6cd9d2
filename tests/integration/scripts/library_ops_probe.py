"""Ops a priced library function issues by operator syntax are in its price (runtime/python_prices.py Note [Ops in a
price]): 100 calls of Transformers' `apply_rotary_pos_emb` on CUDA tensors, which issues six kernels that way and,
through `rotate_half`, two more and four slices, timed by the program's own clock beside the calls it makes of C
functions: two tensor methods and two concatenations. Prints one PROBE line."""

import json
import time

import torch

from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, rotate_half
from phantora.runtime.python_prices import pricer
from phantora.specs.profile import load_profile

CALLS = 100
price_ns = pricer(load_profile("h200").python_prices.value)  # a code object's price at the measured hosts

q = torch.randn(2, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
cos = torch.randn(2, 128, 64, device="cuda", dtype=torch.bfloat16)
sin = torch.randn(2, 128, 64, device="cuda", dtype=torch.bfloat16)
for _ in range(3):  # the allocator's blocks exist before the timed calls
    apply_rotary_pos_emb(q, q, cos, sin)

start = time.perf_counter()
for _ in range(CALLS):
    apply_rotary_pos_emb(q, q, cos, sin)
elapsed_ns = (time.perf_counter() - start) * 1e9

half = q[..., :32]
start = time.perf_counter()
for _ in range(CALLS):  # what the functions call that cProfile times apart from them
    cos.unsqueeze(1)
    sin.unsqueeze(1)
    torch.cat((half, half), dim=-1)  # rotate_half's, of q's halves
    torch.cat((half, half), dim=-1)
calls_ns = (time.perf_counter() - start) * 1e9

print("PROBE " + json.dumps({"elapsed_ns": elapsed_ns, "calls_ns": calls_ns,
                             "priced_ns": CALLS * (price_ns(apply_rotary_pos_emb.__code__)
                                                     + 2 * price_ns(rotate_half.__code__))}))
