"""What the import system finds past one of Phantora's meta path entries (runtime/library_probes.py,
runtime/python_prices.py): each entry asks only those after it, so that two entries never ask each other."""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Sequence


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
