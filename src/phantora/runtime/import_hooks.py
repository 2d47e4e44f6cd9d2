"""Phantora's entries on the import system's meta path: what the entries after one of them find (runtime/python_prices.py,
and `after_import`'s own entry: each asks only those after it, so that two entries never ask each other), and a hook
run on a module once it is imported (runtime/library_probes.py, runtime/python_costs.py)."""

from __future__ import annotations

import importlib.abc
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Callable, Sequence


def find_spec_after(finder: object, name: str, path: Sequence[str] | None,
                    target: ModuleType | None = None) -> ModuleSpec | None:
    """The spec that the meta path entries after `finder` find for module `name` (None: not found)."""
    position = next((index for index, entry in enumerate(sys.meta_path) if entry is finder), None)
    if position is None:
        raise ValueError(f"{finder!r} is not on sys.meta_path")
    for entry in sys.meta_path[position + 1:]:
        find = getattr(entry, "find_spec", None)
        spec = find(name, path, target) if find else None
        if spec is not None:
            return spec
    return None


_hooks: dict[str, list[Callable]] = {}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a hook on a module once it has been executed, wherever it is found."""

    def find_spec(self, name, path, target=None):
        hooks = _hooks.get(name)
        if not hooks:
            return None
        spec = find_spec_after(self, name, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            for hook in hooks:
                hook(module)

        loader.exec_module = exec_module
        return spec


def after_import(name: str, hook: Callable) -> None:
    """Run `hook(module)` when module `name` is imported (now, if it already is)."""
    if name in sys.modules:
        hook(sys.modules[name])
        return
    _hooks.setdefault(name, []).append(hook)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
