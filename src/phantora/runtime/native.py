"""Build (once, cached) and load the native fake-CUDA shim; see Note [Why a native shim] in csrc."""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

SOURCES = (Path(__file__).with_name("csrc") / "phantora_cuda.cpp", Path(__file__).with_name("csrc") / "device_queries.cpp")
"""The fake CUDA device, and the fast answer to C++'s device queries on fake tensors."""


class NativeBuildError(RuntimeError):
    """The shim could not be compiled (a C++ compiler and the torch headers are needed)."""


def cache_dir() -> Path:
    root = os.environ.get("PHANTORA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "phantora")
    return Path(root)


def _build_key() -> str:
    """The shim's source, torch's version and torch's location, found without importing torch: the
    launcher checks the cache before it starts the ranks, and importing torch there would cost every
    run ~200 MB of launcher memory and ~1.5 s before the first rank starts (docs/launcher.md, Scale)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise NativeBuildError("PyTorch is not installed")
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in SOURCES))
    digest.update(importlib.metadata.version("torch").encode())  # torch.__version__
    digest.update(spec.origin.encode())  # torch.__file__
    return digest.hexdigest()[:16]


def _compile_command(output: Path) -> list[str]:
    import torch

    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        os.environ.get("CXX", "g++"), "-O2", "-shared", "-fPIC", "-std=c++20",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-w",
        f"-I{torch_dir / 'include'}", *map(str, SOURCES),
        f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_dir / 'lib'}",
        "-o", str(output),
    ]


def build_shim() -> Path:
    """Compile the shim into the cache unless an up-to-date build is there; safe across processes."""
    target_dir = cache_dir() / _build_key()
    target = target_dir / "libphantora_cuda.so"
    if target.exists():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        partial = target.with_suffix(f".tmp{os.getpid()}")
        result = subprocess.run(_compile_command(partial), capture_output=True, text=True)
        if result.returncode != 0:
            raise NativeBuildError(
                "could not compile Phantora's fake-CUDA shim (needs g++ and torch headers): "
                + result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "compiler failed")
        partial.rename(target)
    return target


@cache
def load_shim() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build_shim()))
    lib.phantora_install.argtypes = [ctypes.c_int]
    lib.phantora_current_stream.restype = ctypes.c_longlong
    lib.phantora_current_stream.argtypes = [ctypes.c_int]
    lib.phantora_set_current_stream.argtypes = [ctypes.c_int, ctypes.c_longlong]
    lib.phantora_new_stream_id.restype = ctypes.c_longlong
    lib.phantora_set_device.argtypes = [ctypes.c_int]
    lib.phantora_set_event_callbacks.argtypes = [EVENT_STREAM_FN, EVENT_STREAM_FN, EVENT_FN, STREAM_FN, ELAPSED_FN]
    return lib


CUDA_DEVICE_TYPE = 1
"""c10::DeviceType::CUDA."""


def install_fast_device_queries(hybrid_mode: object) -> bool:
    """Answer C++'s device queries on fake tensors in the shim while `hybrid_mode` is the top dispatch mode
    (Note [Device queries in C++] in csrc/device_queries.cpp); False where this platform's C++ ABI is not known.
    The shim's functions that take Python objects are called with the GIL held (`PyDLL`)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    python_side = ctypes.PyDLL(load_shim()._name)  # the loaded library again, without building its path anew
    python_side.phantora_fast_device_layout.argtypes = [ctypes.py_object]
    if python_side.phantora_fast_device_layout(torch.device("cuda", 3)) != CUDA_DEVICE_TYPE * 256 + 3:
        return False  # torch.device objects are not laid out as the shim reads them
    python_side.phantora_fast_device_install.argtypes = [ctypes.py_object] * 3
    return bool(python_side.phantora_fast_device_install(hybrid_mode, FakeTensor, torch.device))


EVENT_STREAM_FN = ctypes.CFUNCTYPE(None, ctypes.c_longlong, ctypes.c_int, ctypes.c_longlong)
"""(event id, device, stream id): a C++ event is recorded on, or waited for by, a stream."""
EVENT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_longlong, ctypes.c_int)
"""(event id, query?) -> 1 if done: cudaEventQuery, or cudaEventSynchronize when query is 0."""
STREAM_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_int)
"""(device, stream id or -1 for the whole device, query?) -> 1 if done."""
ELAPSED_FN = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_longlong, ctypes.c_longlong)
"""(start event id, end event id) -> milliseconds."""


def set_event_callbacks(lib: ctypes.CDLL, record, block, event_done, stream_done, elapsed) -> list:
    """Route the C++ side's CUDA events to Python (csrc Note [Events made in C++]); returns the
    ctypes wrappers, which the caller must keep alive as long as they are installed."""
    wrappers = [EVENT_STREAM_FN(record), EVENT_STREAM_FN(block), EVENT_FN(event_done), STREAM_FN(stream_done),
                ELAPSED_FN(elapsed)]
    lib.phantora_set_event_callbacks(*wrappers)
    return wrappers


if __name__ == "__main__":
    print(build_shim())
    sys.exit(0)
