"""Running a framework's own launcher code in Phantora's launcher, as if on a node of the simulated cluster.

`phantora deepspeed` and `phantora accelerate launch` reproduce what `deepspeed` and `accelerate
launch` would start by calling those frameworks' own parsers and launch helpers here, in the launcher
process (cli/deepspeed.py, cli/accelerate.py). Three things differ from running them on a GPU node:
- they are imported only when their command is used (`import_framework`), with a one-line error when
  the framework is not installed;
- they ask this machine about its GPUs (`torch.cuda.device_count()`, `is_bf16_supported()`), to pick
  defaults such as "every GPU of the node"; `simulated_node` answers for the duration of the call as
  one node of the simulated cluster would;
- their parsers print a usage and exit on bad input; `parse_quietly` turns that into one line.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


class FrameworkLauncherError(ValueError):
    """A framework launcher's option or input that Phantora cannot honour (one line)."""


def import_framework(module: str, *, command: str, install: str) -> ModuleType:
    """Import a framework's launcher module, or fail in one line saying how to install the framework."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise FrameworkLauncherError(f"phantora {command} runs the framework's own launcher code, but {module} "
                                     f"cannot be imported ({error}); install it: {install}") from None


@contextmanager
def simulated_node(gpus: int, compute_capability: tuple[int, int]) -> Iterator[None]:
    """While inside, `torch.cuda` tells a framework's launcher code what one simulated node has: `gpus`
    CUDA devices, with bf16 where the GPU has it (compute capability 8.0 or later, as torch checks).
    Launchers only count and query devices; nothing here runs on one."""
    import torch

    names = ("is_available", "device_count", "is_bf16_supported")
    saved = {name: getattr(torch.cuda, name) for name in names}
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: gpus
    torch.cuda.is_bf16_supported = lambda including_emulation=True: tuple(compute_capability) >= (8, 0)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(torch.cuda, name, function)


def parse_quietly(parse: Callable[[list[str]], T], words: list[str], *, prog: str) -> T:
    """Run a framework's argparse-based `parse(words)`: its help is printed as it would be (and exits 0);
    its usage error becomes a FrameworkLauncherError with argparse's one-line message."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            return parse(words)
    except SystemExit as stop:
        if stop.code in (0, None):  # --help
            sys.stdout.write(out.getvalue())
            raise
        lines = err.getvalue().strip().splitlines()
        message = lines[-1].split(": error: ", 1)[-1] if lines else f"invalid arguments {words}"
        raise FrameworkLauncherError(f"{prog}: {message}") from None


def help_text(parse: Callable[[list[str]], object]) -> str:
    """What a framework's argparse-based `parse(["--help"])` prints."""
    out = io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            parse(["--help"])
    except SystemExit:
        pass
    return out.getvalue()


def added_variables(environment: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a launcher's environment for its workers sets beyond `base` (default os.environ)."""
    base = os.environ if base is None else base
    return {name: value for name, value in environment.items() if base.get(name) != value}


def one_line(error: BaseException) -> str:
    """An exception's message on one line (frameworks' messages span several)."""
    return " ".join(str(error).split()) or type(error).__name__
