"""Benchmark scripts (benchmarks/, not a package) loaded as modules, for tests of the fits they hold."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark(relative_path: str) -> ModuleType:
    """The module in ROOT/relative_path, registered in sys.modules (a dataclass looks its module up there)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
