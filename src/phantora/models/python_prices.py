"""What a call of a framework library's Python function costs the host: its own time per call on the reference host.

Note: [Library Python]
The host model (models/host.py) charges what the runtime sees: ops, module calls, optimizer steps, a few library
entry points. A framework whose Python does much between its ops, DeepSpeed ZeRO-3's hooks and parameter
bookkeeping, Megatron-core's tensor-parallel layers and their gradient hooks, then has a host time the model
does not see, and a host-bound step comes out short (docs/models/host.md). A call count cannot price it: a
DeepSpeed call took 1 µs and a Megatron-core call 6-9 µs on the same hosts. So each function is priced
by itself, like a kernel: its own time per call (its bytecode, not the functions it calls, Python or C),
measured by cProfile in the steady steps of framework programs on the reference hosts and brought to the
host the other constants stand for (benchmarks/host/fit_python_prices.py on data/h200/host/python_profiles).

A function is named by its file relative to the site packages, its first line and its name, as cProfile names
it. Another version of a library moves lines: a function is then priced by the functions of its name in its
file, and a function the profiles never ran by its library's mean. A library the profiles did not measure has
no prices: its Python stays with the model's other terms, as the program's own code does. A module's `forward` has
no price: it runs in a module call, which the host model charges with its Python (`module_call_ns`). An autograd
Function's `forward` is no module call (its `apply` calls it) and the fit prices it; as the two cannot be told apart
by name, a `forward` is priced by its own line alone, never by its name or its library's mean.

A priced library is a site package (`deepspeed`), or one module of torch whose Python no other term charges
(`torch/utils/checkpoint.py`), named by its file: the rest of torch's Python is the model's other terms' (module
calls, optimizers, FSDP2, DTensor), and a price for all of torch would charge it twice. Activation
checkpointing's Python runs per op and per saved tensor: its saved-tensor hooks, the recomputation's bookkeeping,
and per-op selective checkpointing's two dispatch modes, a Python `__torch_dispatch__` around every forward and
recomputed op. Such a module's torch is the user's, not the measured one, and its functions are split and renamed
between releases: a function of it the profiles never ran is priced by its name or not at all (its work moved out
of the functions that were measured), where a package's takes the package's mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MODULE_CALL = "forward"
"""A module's forward, priced by the host model's module call (`module_call_ns`) with its Python; a `forward` is
priced here only by its line (an autograd Function's)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PythonPrices:
    """ns per call of library functions on the reference host; empty for a profile without them."""

    functions: Mapping[str, int] = field(default_factory=dict)
    """"<file>:<first line>:<name>" -> ns per call, <file> relative to the site packages (deepspeed/...)."""
    names: Mapping[str, int] = field(default_factory=dict)
    """"<file>:<name>" -> ns per call over the functions of that name in that file (another version's lines)."""
    libraries: Mapping[str, int] = field(default_factory=dict)
    """Priced library -> ns per call over all its measured calls (a function the profiles never ran): a top-level
    package ("deepspeed"), or a module's file ("torch/utils/checkpoint.py") where the rest of its package is not
    priced."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """The version of each library that was measured."""

    def __post_init__(self) -> None:
        for table in (self.functions, self.names, self.libraries):
            if any(not isinstance(ns, int) or ns < 0 for ns in table.values()):
                raise ValueError("prices must be whole non-negative ns")

    def price_ns(self, file: str, line: int, name: str) -> int:
        """ns per call of the function `name` at `line` of `file` (relative to the site packages); 0 where its
        library has no prices, and for a `forward` the table does not hold by its line."""
        library = self.library_of(file)
        if library is None:
            return 0
        found = self.functions.get(f"{file}:{line}:{name}")
        if found is not None:
            return found
        if name == MODULE_CALL:
            return 0
        unseen = self.libraries[library] if library != file else 0
        return self.names.get(f"{file}:{name}", unseen)

    def library_of(self, file: str) -> str | None:
        """The priced library `file` (relative to the site packages) belongs to: its package, or the file itself."""
        package = file.partition("/")[0]
        if package in self.libraries:
            return package
        return file if file in self.libraries else None

    def module_names(self) -> frozenset[str]:
        """The importable names of the priced libraries: packages as they are, files as dotted module names."""
        return frozenset(library.removesuffix(".py").replace("/", ".") for library in self.libraries)

    def scaled(self, factor: float) -> "PythonPrices":
        """Every price multiplied by `factor` (a host CPU that takes `factor` times as long)."""
        def scale(table: Mapping[str, int]) -> dict[str, int]:
            return {key: round(ns * factor) for key, ns in table.items()}
        return PythonPrices(functions=scale(self.functions), names=scale(self.names),
                            libraries=scale(self.libraries), versions=self.versions)
