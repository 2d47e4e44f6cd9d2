"""A priced library's Python costs simulated host time (models/python_prices.py Note [Library Python]): 1000 calls of
a DeepSpeed function that issues no op, timed by the program's own clock. Prints one PROBE line."""

import json
import time

import torch  # noqa: F401  (the runtime has imported it: this import starts no pricing)

from deepspeed.runtime.compiler import is_compiling
from phantora.models.python_prices import PythonPrices
from phantora.runtime.python_prices import site_relative
from phantora.specs.profile import load_profile

CALLS = 1000
code = is_compiling.__code__
start = time.perf_counter()
for _ in range(CALLS):
    is_compiling()
elapsed_ns = (time.perf_counter() - start) * 1e9
prices: PythonPrices = load_profile("h200").python_prices.value
price_ns = prices.price_ns(site_relative(code.co_filename), code.co_firstlineno, code.co_name)
print("PROBE " + json.dumps({"elapsed_ns": elapsed_ns, "priced_ns": CALLS * price_ns}))
