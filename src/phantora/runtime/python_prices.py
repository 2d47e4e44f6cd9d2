"""Charge the host clock for each call of a library function with a measured price (models/python_prices.py Note
[Library Python]).

A priced library's modules are loaded with a call at every entry of each of their functions (entry_calls.py Note
[A call at every entry]): the call charges that function's price, decided once per code object from the GPU
profile's `python_prices` at this run's host scale, to the session's host clock, on whichever thread runs it, as
a module call or an optimizer step is charged (runtime/python_costs.py). Nothing else is slowed: the program's own
code, torch's and Phantora's run as they were. A priced library's modules that were imported before install (a
`sitecustomize`, a preloading launcher) have their functions' code replaced in place (`_price_loaded`); a closure
such a module made before install keeps its unpriced code. Code that torch.compile traces does not charge (its
Python does not run in the compiled step); ranks end without interpreter teardown (bootstrap.py), which would
remove the charge from `builtins` while finalizers still run.

Note: [Ops in a price]
A price is a function's own time under cProfile, which records the calls of Python functions and of C functions and
methods, and nothing else. An op a priced function issues by operator syntax (`q * cos`, `x[..., :half]`, `-x`, `x.T`,
`if mask.any()`) runs its whole C++ path, argument parsing, dispatch, autograd and launch, inside that function's own
time, so its price holds the op's host cost already; an op it issues by calling a C function (`torch.cat`, `x.view`)
was timed as that call's and is not in the price. The first are not charged again (`PricedCode.holds_op_issued_by`):
Transformers' `apply_rotary_pos_emb`, priced at about 107 µs a call, issues six kernels by operator syntax. A call of
a C type is not recorded by cProfile either, but the issuing frame cannot tell it from a C function's: a tensor built
by calling a tensor type (`torch.LongTensor(ids)`) in priced code is charged beside its price.
"""

from __future__ import annotations

import builtins
import dis
import functools
import importlib.machinery
import os
import re
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import TYPE_CHECKING

from phantora.runtime.entry_calls import rewrite_all, with_entry_calls
from phantora.runtime.import_hooks import find_spec_after

if TYPE_CHECKING:
    from phantora.models.python_prices import PythonPrices
    from phantora.runtime.session import Session

CHARGE_NAME = "__phantora_python_price__"
"""The name, in `builtins`, that priced code calls with its price in ns."""

_SITE = re.compile(r"[/\\](?:site|dist)-packages[/\\](.+)$")


def site_relative(file: str) -> str | None:
    """`file`'s path under the site packages that hold it ("deepspeed/runtime/engine.py"), None outside them."""
    found = _SITE.search(file)
    return found.group(1).replace("\\", "/") if found else None


def pricer(prices: PythonPrices) -> Callable[[CodeType], int]:
    """code -> ns per call of that code's function (0 for none)."""
    def price(code: CodeType) -> int:
        file = site_relative(code.co_filename)
        return 0 if file is None else prices.price_ns(file, code.co_firstlineno, code.co_name)
    return price


_CALLS = frozenset(dis.opmap[name] for name in ("CALL", "CALL_FUNCTION_EX", "CALL_KW") if name in dis.opmap)
"""The instructions that call: a C function or method called by them is timed apart from its caller's own time."""


class PricedCode:
    """The code objects that charge a price at their entries, by identity (kept alive here, so that an id stays its
    code's)."""

    def __init__(self) -> None:
        self._codes: dict[int, CodeType] = {}

    def add(self, code: CodeType) -> None:
        self._codes[id(code)] = code

    def holds_op_issued_by(self, frame: FrameType) -> bool:
        """Whether an op that `frame`, the innermost Python frame, issues now runs inside the own time of a priced
        function, whose price then holds the op's host cost (Note [Ops in a price])."""
        code = frame.f_code
        return id(code) in self._codes and code.co_code[frame.f_lasti] not in _CALLS


def priced_code(code: CodeType, price: Callable[[CodeType], int], priced: PricedCode) -> CodeType:
    """`code` and the code nested in it, each function with a price calling the charge at its entries (and kept in
    `priced`)."""
    def with_charge(one: CodeType) -> CodeType:
        ns = price(one)
        if ns <= 0:
            return one
        charged = with_entry_calls(one, CHARGE_NAME, ns)
        priced.add(charged)
        return charged
    return rewrite_all(code, with_charge)


def install_python_prices(session: Session) -> PricedImports | None:
    """Load priced libraries with their functions priced from now on, and price those loaded already; None where the
    GPU's profile has no prices."""
    prices = session.profile.python_prices.value
    if not prices.libraries:
        return None
    scale = session.config.host_time_scale
    price = pricer(prices.scaled(scale) if scale != 1.0 else prices)
    _install_charge(functools.partial(session.host_work, term="library Python"))
    priced = PricedImports(prices.module_names(), price)
    sys.meta_path.insert(0, priced)
    for module in [module for name, module in sys.modules.items() if priced.prices(name)]:
        _price_loaded(module, price, priced.code)
    return priced


def _install_charge(host_work: Callable[[int], None]) -> None:
    """Put the charge where priced code finds it, give it a no-op in torch.compile's graphs, and take it away in a
    forked child (a DataLoader worker runs on its own CPU)."""
    import torch

    def charge(ns: int) -> None:
        host_work(ns)

    def compiled(ns: int) -> None:  # what the compiled step runs in its place: nothing
        return None

    torch.compiler.substitute_in_graph(charge)(compiled)
    setattr(builtins, CHARGE_NAME, charge)
    os.register_at_fork(after_in_child=lambda: setattr(builtins, CHARGE_NAME, compiled))


class PricedImports:
    """A meta path entry that has the source modules of priced libraries loaded with priced code."""

    def __init__(self, libraries: frozenset[str], price: Callable[[CodeType], int]) -> None:
        self.libraries, self.price = libraries, price
        """Module names: a package's covers its modules, another module's itself (`PythonPrices.module_names`)."""
        self.code = PricedCode()
        """Every function's code given a charge so far."""

    def prices(self, name: str) -> bool:
        """Whether the module `name` belongs to a priced library."""
        return name.partition(".")[0] in self.libraries or name in self.libraries

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if not self.prices(name):
            return None
        spec = find_spec_after(self, name, path, target)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            # the loader's own code, priced (the bytecode cache it writes stays the original); set on the instance,
            # as runtime/library_probes.py sets its exec_module, so that either entry may come first
            read_code = spec.loader.get_code
            spec.loader.get_code = lambda fullname: priced_code(read_code(fullname), self.price, self.code)
        return spec


def _price_loaded(module: ModuleType, price: Callable[[CodeType], int], priced: PricedCode) -> None:
    """Give the functions of an imported module, and of its classes, priced code (once: a function may be reached
    under several names)."""
    def price_function(function: object) -> None:
        # a decorated function's own code is its `__wrapped__` one's (functools.wraps; torch wraps every dispatch
        # mode's `__torch_dispatch__`), as a module loaded with priced code has it priced
        while isinstance(function, FunctionType) and function.__module__ == module.__name__:
            if CHARGE_NAME not in function.__code__.co_names:
                function.__code__ = priced_code(function.__code__, price, priced)
            function = getattr(function, "__wrapped__", None)

    for value in list(vars(module).values()):
        price_function(value)
        if isinstance(value, type) and value.__module__ == module.__name__:
            for member in vars(value).values():
                for function in (member, getattr(member, "__func__", None), getattr(member, "fget", None),
                                 getattr(member, "fset", None)):
                    price_function(function)
