"""A priced library's Python costs simulated host time (models/python_prices.py Note [Library Python]): 1000 calls of
a DeepSpeed function that issues no op (`is_moe_param`, a priced attribute check), timed by the program's own clock.
Prints one PROBE line."""

import json
import time

import torch  # the runtime has imported it: this import starts no pricing

from deepspeed.moe.utils import is_moe_param
from phantora.models.python_prices import PythonPrices
from phantora.runtime.python_prices import site_relative
from phantora.specs.profile import load_profile

CALLS = 1000
code = is_moe_param.__code__
param = torch.zeros(1)  # a host tensor: the check reads an attribute and issues no op
start = time.perf_counter()
for _ in range(CALLS):
    is_moe_param(param)
elapsed_ns = (time.perf_counter() - start) * 1e9
prices: PythonPrices = load_profile("h200").python_prices.value
price_ns = prices.price_ns(site_relative(code.co_filename), code.co_firstlineno, code.co_name)
print("PROBE " + json.dumps({"elapsed_ns": elapsed_ns, "priced_ns": CALLS * price_ns}))
