"""What a fresh interpreter loads when it imports part of Phantora: checked in a process of its own, since this
one has long since imported torch and everything else."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.every_build


def modules_loaded_by(statement: str, *names: str) -> dict[str, bool]:
    """Which of `names` are in sys.modules after a new Python runs `statement`."""
    probe = f"import sys; {statement}; print(*(name in sys.modules for name in {names!r}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return dict(zip(names, (word == "True" for word in done.stdout.split())))


def test_the_launcher_checks_the_native_shim_without_importing_torch():
    """Scale (docs/launcher.md): the launcher checks the shim's build cache once, without torch's import time."""
    from phantora.runtime.native import build_shim
    build_shim()  # compile once if needed (this may import torch: not in the child below)
    assert modules_loaded_by("from phantora.runtime.native import build_shim; build_shim()", "torch") == {
        "torch": False}


def test_importing_phantoras_runtime_does_not_look_for_cuda_before_the_fake_device_exists():
    """cpp_extension looks for CUDA when it is imported and warns on every rank if `torch.cuda.is_available()`
    is still False; Phantora imports it only once the fake device is installed (runtime/extensions.py)."""
    loaded = modules_loaded_by("import phantora.runtime.bootstrap, phantora.runtime.extensions",
                               "torch.utils.cpp_extension")
    assert loaded == {"torch.utils.cpp_extension": False}
