"""Charge the host clock for each call of a library function with a measured price (models/python_prices.py Note
[Library Python]).

A C profile function sees every Python call of a priced thread (csrc/python_prices.cpp Note [Pricing library
Python in C]); a code object is priced once, here, from the GPU profile's `python_prices` at this run's host scale,
and a priced call charges the session's host clock at its start, as a module call or an optimizer step is charged
(runtime/python_costs.py). Pricing starts when the program imports a priced library (Note [Pricing starts at a
priced import]): on the importing thread then, on any other from its first op (the autograd engine's device
threads run the program's backward hooks), so a thread's Python before its first op is not priced. A program's own
`sys.setprofile`, `cProfile` or `torch.profiler` with Python stacks takes the place of the profile function on its
threads: their library Python is then not priced.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from types import CodeType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from phantora.models.python_prices import PythonPrices
    from phantora.runtime.session import Session

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


class PythonPricing:
    """The shim's profile function, set up to charge `charge(ns)` for each priced call."""

    def __init__(self, library: str, price: Callable[[CodeType], int], charge: Callable[[int], None]) -> None:
        self._lib = ctypes.PyDLL(library)  # its functions take Python objects and need the GIL held
        self._lib.phantora_set_python_pricing.argtypes = [ctypes.py_object, ctypes.py_object]
        self._lib.phantora_set_python_pricing(price, charge)

    def this_thread(self) -> None:
        """Price the calling thread's Python from now on."""
        self._lib.phantora_price_python_on_this_thread()

    def stop_this_thread(self) -> None:
        self._lib.phantora_stop_pricing_python_on_this_thread()


def install_python_prices(session: Session, library: str) -> PythonPricing | None:
    """Price the library Python of this process's threads from the program's first import of a priced library
    (Note [Pricing starts at a priced import]), or return None where the GPU's profile has no prices."""
    prices = session.profile.python_prices.value
    if not prices.libraries:
        return None
    scale = session.config.host_time_scale
    pid = os.getpid()

    def charge(ns: int) -> None:
        if os.getpid() == pid:  # a DataLoader worker forked from this process runs on its own CPU
            session.host_work(ns)

    pricing = PythonPricing(library, pricer(prices.scaled(scale) if scale != 1.0 else prices), charge)
    if prices.libraries.keys() & sys.modules.keys():  # imported already (a sitecustomize, a preloading launcher)
        _start(pricing)
    else:
        sys.meta_path.insert(0, _StartOnImport(frozenset(prices.libraries), pricing))
    return pricing


def _start(pricing: PythonPricing) -> None:
    """Price the calling thread now and every other thread from its first op (runtime/dispatch.py)."""
    from phantora.runtime import dispatch

    started_on = threading.get_ident()
    dispatch.on_new_thread(lambda: threading.get_ident() != started_on and pricing.this_thread())
    pricing.this_thread()


# Note: [Pricing starts at a priced import]
# The profile function costs every Python call of a priced thread about 0.1 µs of the simulator's own time,
# Phantora's included (DeepSpeed ZeRO-3's example ran 1.5x as long: docs/runtime.md), so it is set only once the
# program imports a library with prices (DeepSpeed, Megatron-core,
# Transformers, Accelerate), or at install where one is imported already. Another thread that issued ops before
# that is not priced (its first op, which prices the others, is behind it): in the programs measured, the libraries
# are imported before any op.
class _StartOnImport:
    """A meta path entry that finds nothing: it starts pricing when a priced library's top module is first
    imported, then leaves the path."""

    def __init__(self, libraries: frozenset[str], pricing: PythonPricing) -> None:
        self.libraries, self.pricing = libraries, pricing

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in self.libraries:
            sys.meta_path.remove(self)
            _start(self.pricing)
        return None
