"""Library Python prices: the table's fallbacks (models/python_prices.py) and the import that gives a priced
library's functions their charge (runtime/python_prices.py)."""

import builtins
import sys
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from phantora.models.python_prices import PythonPrices
from phantora.runtime import import_hooks, python_prices
from phantora.runtime.issuer import issuing_frame
from phantora.runtime.python_prices import CHARGE_NAME, PricedCode, PricedImports, pricer, site_relative

PRICES = PythonPrices(functions={"deepspeed/runtime/zero/stage3.py:10:hook": 2000,
                                 "deepspeed/runtime/zero/linear.py:84:forward": 4000},
                      names={"deepspeed/runtime/zero/stage3.py:hook": 1500, "deepspeed/utils/a.py:helper": 700},
                      libraries={"deepspeed": 900}, versions={"deepspeed": "0.19.8"})


def test_a_function_is_priced_by_its_line_then_its_name_then_its_library():
    assert PRICES.price_ns("deepspeed/runtime/zero/stage3.py", 10, "hook") == 2000
    assert PRICES.price_ns("deepspeed/runtime/zero/stage3.py", 12, "hook") == 1500  # another version's line
    assert PRICES.price_ns("deepspeed/runtime/engine.py", 5, "step") == 900  # never profiled
    assert PRICES.price_ns("megatron/core/utils.py", 5, "helper") == 0  # a library without prices
    assert PRICES.price_ns("deepspeed/runtime/zero/linear.py", 84, "forward") == 4000  # an autograd Function's
    assert PRICES.price_ns("deepspeed/runtime/zero/linear.py", 90, "forward") == 0  # a module call's, by its line
    assert PRICES.price_ns("deepspeed/runtime/engine.py", 5, "forward") == 0
    assert PRICES.scaled(2.0).price_ns("deepspeed/utils/a.py", 1, "helper") == 1400


def test_a_torch_module_is_priced_by_its_file_and_the_rest_of_torch_is_not():
    prices = PythonPrices(functions={"torch/utils/checkpoint.py:10:pack_hook": 4000},
                          names={"torch/utils/checkpoint.py:pack_hook": 3900},
                          libraries={"torch/utils/checkpoint.py": 1700, "deepspeed": 900})
    assert prices.price_ns("torch/utils/checkpoint.py", 10, "pack_hook") == 4000
    assert prices.price_ns("torch/utils/checkpoint.py", 90, "pack_hook") == 3900  # another release's line
    assert prices.price_ns("torch/utils/checkpoint.py", 50, "_new_helper") == 0  # work moved out of priced ones
    assert prices.price_ns("deepspeed/runtime/engine.py", 5, "step") == 900  # a package's mean
    assert prices.price_ns("torch/utils/_pytree.py", 1, "tree_map") == 0
    assert prices.module_names() == {"torch.utils.checkpoint", "deepspeed"}
    priced = PricedImports(prices.module_names(), lambda code: 0)
    assert priced.prices("torch.utils.checkpoint") and priced.prices("deepspeed.runtime.engine")
    assert not priced.prices("torch") and not priced.prices("torch.utils")


def test_negative_prices_are_refused():
    with pytest.raises(ValueError):
        PythonPrices(libraries={"deepspeed": -1})


def test_files_are_named_relative_to_the_site_packages():
    assert site_relative("/x/.venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py") == \
        "deepspeed/runtime/engine.py"
    assert site_relative("/usr/lib/python3/dist-packages/megatron/core/utils.py") == "megatron/core/utils.py"
    assert site_relative("/work/examples/train.py") is None


LIBRARY = """
import functools

import torch


def hook(n):
    return helper(n)

def doubled(x):
    return x * 2

def joined(x):
    return torch.cat((x, x))

def helper(n):
    return n

class Engine:
    def hook(self, n):
        return n

    @staticmethod
    def helper(n):
        return n


Engine.alias = staticmethod(hook)  # reached twice: as the module's and as the class's


def wrapped(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)
    return wrapper


class Mode:  # as torch wraps a dispatch mode's `__torch_dispatch__`
    @wrapped
    def hook(self, n):
        return n
"""


@pytest.fixture
def charged(tmp_path, monkeypatch):
    """A library `pricedlib` under a site-packages folder, to be imported (hook: 300 ns, helper: none); yields the
    charges."""
    package = tmp_path / "site-packages" / "pricedlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(LIBRARY)
    charges: list[int] = []
    monkeypatch.setattr(builtins, CHARGE_NAME, charges.append, raising=False)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delitem(sys.modules, "pricedlib", raising=False)
    yield charges
    sys.modules.pop("pricedlib", None)


PRICED = ("hook", "doubled", "joined")


def priced_imports() -> PricedImports:
    return PricedImports(frozenset({"pricedlib"}), lambda code: 300 if code.co_name in PRICED else 0)


@pytest.fixture
def priced_library(charged, monkeypatch):
    """`pricedlib` imported through `PricedImports`; yields the module and the charges."""
    monkeypatch.setattr(sys, "meta_path", [priced_imports(), *sys.meta_path])
    import pricedlib
    return pricedlib, charged


@pytest.mark.parametrize("priced_first", [True, False])
def test_an_after_import_hook_and_the_prices_load_a_module_together(charged, monkeypatch, priced_first):
    hooked = []
    monkeypatch.setitem(import_hooks._hooks, "pricedlib", [hooked.append])
    entries = [priced_imports(), import_hooks._AfterImport()]
    others = [entry for entry in sys.meta_path if not isinstance(entry, import_hooks._AfterImport)]
    monkeypatch.setattr(sys, "meta_path", [*(entries if priced_first else entries[::-1]), *others])
    import pricedlib
    pricedlib.hook(1)
    assert hooked == [pricedlib] and charged == [300]


def test_a_priced_library_charges_each_call_of_a_priced_function_on_any_thread(priced_library):
    library, charged = priced_library
    for i in range(5):
        library.hook(i)
    assert charged == [300] * 5
    worker = threading.Thread(target=lambda: [library.hook(i) for i in range(3)])
    worker.start()
    worker.join()
    assert charged == [300] * 8
    library.helper(0)
    assert charged == [300] * 8


def test_a_library_imported_before_install_is_priced_in_place(charged):
    import pricedlib

    engine = pricedlib.Engine()
    pricedlib.hook(1), engine.hook(1)
    assert charged == []
    python_prices._price_loaded(pricedlib, priced_imports().price, PricedCode())
    pricedlib.hook(1), engine.hook(1), engine.helper(1)
    assert charged == [300, 300]
    engine.alias(1)
    assert charged == [300, 300, 300]  # priced once, though reached twice
    pricedlib.Mode().hook(1)
    assert charged == [300] * 4  # a decorated method: its own code, under the wrapper


def test_an_op_issued_by_operator_syntax_in_priced_code_is_in_its_price(priced_library):
    """runtime/python_prices.py Note [Ops in a price]: the price holds `x * 2`'s op, not `torch.cat`'s (a C function
    cProfile timed apart), nor an op of unpriced code."""
    library, _ = priced_library
    priced = sys.meta_path[0].code
    seen = []

    class Issuers(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((func, priced.holds_op_issued_by(issuing_frame(sys._getframe().f_back))))
            return func(*args, **(kwargs or {}))

    x = torch.ones(3)
    with Issuers():
        library.doubled(x)
        library.joined(x)
        x * 2
    aten = torch.ops.aten
    assert seen == [(aten.mul.Tensor, True), (aten.cat.default, False), (aten.mul.Tensor, False)]


def test_compiled_code_has_no_charge_in_its_graph(priced_library, phantora_skipped_by_dynamo):
    library, _ = priced_library
    charged: list[int] = []
    python_prices._install_charge(charged.append)

    def step(x):
        return library.hook(x) * 2

    explained = torch._dynamo.explain(step)(torch.ones(3))
    assert explained.graph_break_count == 0
    compiled = torch.compile(step, backend="eager")
    compiled(torch.ones(3))
    compiled(torch.ones(3))
    assert charged == []  # the compiled step runs none of the library's Python
    library.hook(1)
    assert charged == [300]
    torch._dynamo.reset()


def test_the_pricer_maps_code_objects_to_the_tables_prices():
    def hook():
        pass

    price = pricer(PRICES)
    assert price(hook.__code__) == 0  # a test file is no site package
    code = compile("def hook():\n    pass\n", "/v/lib/python3.11/site-packages/deepspeed/runtime/zero/stage3.py",
                   "exec")
    function_code = next(c for c in code.co_consts if hasattr(c, "co_name"))
    assert price(function_code) == 1500  # line 1: priced by its name
