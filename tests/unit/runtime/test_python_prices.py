"""Library Python prices: the table's fallbacks (models/python_prices.py) and the shim's profile function that
charges each priced call (csrc/python_prices.cpp Note [Pricing library Python in C])."""

import threading

import pytest

from phantora.models.python_prices import PythonPrices
from phantora.runtime.native import build_shim
from phantora.runtime.python_prices import PythonPricing, pricer, site_relative

PRICES = PythonPrices(functions={"deepspeed/runtime/zero/stage3.py:10:hook": 2000},
                      names={"deepspeed/runtime/zero/stage3.py:hook": 1500, "deepspeed/utils/a.py:helper": 700},
                      libraries={"deepspeed": 900}, versions={"deepspeed": "0.19.8"})


def test_a_function_is_priced_by_its_line_then_its_name_then_its_library():
    assert PRICES.price_ns("deepspeed/runtime/zero/stage3.py", 10, "hook") == 2000
    assert PRICES.price_ns("deepspeed/runtime/zero/stage3.py", 12, "hook") == 1500  # another version's line
    assert PRICES.price_ns("deepspeed/runtime/engine.py", 5, "step") == 900  # never profiled
    assert PRICES.price_ns("megatron/core/utils.py", 5, "helper") == 0  # a library without prices
    assert PRICES.scaled(2.0).price_ns("deepspeed/utils/a.py", 1, "helper") == 1400


def test_negative_prices_are_refused():
    with pytest.raises(ValueError):
        PythonPrices(libraries={"deepspeed": -1})


def test_files_are_named_relative_to_the_site_packages():
    assert site_relative("/x/.venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py") == \
        "deepspeed/runtime/engine.py"
    assert site_relative("/usr/lib/python3/dist-packages/megatron/core/utils.py") == "megatron/core/utils.py"
    assert site_relative("/work/examples/train.py") is None


def priced(n: int) -> int:
    return n


def unpriced(n: int) -> int:
    return n


def test_the_profile_function_charges_each_priced_call_on_the_threads_it_prices():
    charged: list[int] = []
    pricing = PythonPricing(str(build_shim()), lambda code: 300 if code is priced.__code__ else 0, charged.append)
    try:
        pricing.this_thread()
        for i in range(5):
            unpriced(priced(i))
        assert charged == [300] * 5
        worker = threading.Thread(target=lambda: [priced(i) for i in range(3)])
        worker.start()
        worker.join()
        assert charged == [300] * 5  # a thread not priced yet
    finally:
        pricing.stop_this_thread()
    priced(0)
    assert charged == [300] * 5


def test_the_pricer_maps_code_objects_to_the_tables_prices():
    def hook():
        pass

    price = pricer(PRICES)
    assert price(hook.__code__) == 0  # a test file is no site package
    code = compile("def hook():\n    pass\n", "/v/lib/python3.11/site-packages/deepspeed/runtime/zero/stage3.py",
                   "exec")
    function_code = next(c for c in code.co_consts if hasattr(c, "co_name"))
    assert price(function_code) == 1500  # line 1: priced by its name
