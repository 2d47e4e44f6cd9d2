"""The `torch.cuda` a script sees: a simulated GPU from its profile's spec, backed by the session.

PyTorch's own `torch.cuda` Python code stays in charge (device contexts, memory helpers,
RNG helpers); what a CPU build lacks is the `torch._C._cuda_*` layer under it, so this module
supplies those functions, the stream and event classes, the device properties and `cudart`,
and replaces the few names `torch.cuda` bound at import time. Memory statistics come from the
caching-allocator model, stream and event times from the coordinator (runtime/engine_link.py).
"""

from __future__ import annotations

import itertools
import sys
import threading
from dataclasses import dataclass
from typing import Any

import torch

from phantora.models.gpu import GpuSpec
from phantora.runtime import cuda_graphs, native
from phantora.runtime.session import Session

_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA
CUDA_VERSION = "13.0"
"""What `torch.version.cuda` reports: the CUDA of the H200 machines Phantora is calibrated on."""


@dataclass(frozen=True)
class DeviceProperties:
    """Mirrors `torch._C._CudaDeviceProperties` for a simulated GPU."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int
    max_threads_per_multi_processor: int
    warp_size: int
    uuid: str
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    regs_per_multiprocessor: int = 65536
    shared_memory_per_block: int = 49152
    shared_memory_per_block_optin: int = 232448
    shared_memory_per_multiprocessor: int = 233472
    max_threads_per_block: int = 1024
    gcnArchName: str = "NVIDIA CUDA"
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
                f"pci_bus_id={self.pci_bus_id}, pci_device_id={self.pci_device_id}, "
                f"pci_domain_id={self.pci_domain_id}, L2_cache_size={self.L2_cache_size // (1024 * 1024)}MB)")


def device_properties(gpu: GpuSpec, index: int) -> DeviceProperties:
    return DeviceProperties(
        name=gpu.name, major=gpu.compute_capability[0], minor=gpu.compute_capability[1],
        total_memory=gpu.total_memory_bytes, multi_processor_count=gpu.sm_count,
        L2_cache_size=gpu.l2_cache_bytes, max_threads_per_multi_processor=gpu.max_threads_per_sm,
        warp_size=gpu.warp_size, uuid=f"phantora-{gpu.key}-{index:04d}", pci_bus_id=index,
    )


class CudaApi:
    """Installs and backs the fake `torch.cuda` of one process."""

    def __init__(self, session: Session, shim, recorder) -> None:
        self.session = session
        self.shim = shim
        self.recorder = recorder
        self.count = session.config.devices_per_process
        self.properties = [device_properties(session.gpu, i) for i in range(self.count)]

    # -- devices -----------------------------------------------------------------------------
    def current_device(self) -> int:
        return self.shim.phantora_current_device()

    def _index(self, device: Any) -> int:
        if device is None:
            return self.current_device()
        if isinstance(device, int):
            index = device
        else:
            index = torch.device(device).index
            if index is None:
                return self.current_device()
        if index < 0:
            return self.current_device()
        if index >= self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal (device {index}, "
                               f"{self.count} simulated device(s))")
        return index

    def set_device(self, device: int) -> None:
        index = self._index(device)
        self.shim.phantora_set_device(index)
        torch._C._accelerator_setDeviceIndex(index)

    def exchange_device(self, device: int) -> int:
        previous = self.current_device()
        if device >= 0:
            self.set_device(device)
        return previous

    def maybe_exchange_device(self, device: int) -> int:
        """`torch.cuda._maybe_exchange_device`: as `exchange_device`, a function of its own (Dynamo keys its
        handlers by function, and two names bound to one method would collide)."""
        return self.exchange_device(device)

    # -- streams -----------------------------------------------------------------------------
    def current_stream_tuple(self, device: Any = None) -> tuple[int, int, int]:
        index = self._index(device)
        return (self.shim.phantora_current_stream(index), index, _CUDA_DEVICE_TYPE)

    def set_stream(self, stream_id: int = 0, device_index: int = 0, device_type: int = 0) -> None:
        self.shim.phantora_set_current_stream(device_index, stream_id)

    def synchronize(self, device: Any = None) -> None:
        self.session.synchronize_device(self._index(device))

    # -- memory ------------------------------------------------------------------------------
    def allocator(self, device: Any = None):
        self.recorder.memory.drain_frees()
        return self.session.allocators[self._index(device)]

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return self.allocator(device).mem_get_info()

    def empty_cache(self) -> None:
        for index in range(self.count):
            self.allocator(index).empty_cache()


def _make_stream_classes(api: CudaApi):
    """`torch.cuda.Stream` and `torch.cuda.Event` for the simulated device: their work is described
    to the coordinator (event records, stream waits) and their questions asked of it."""
    session = api.session
    link = session.link

    class Stream(torch.Stream):
        """A CUDA stream of the simulated GPU (a FIFO queue of the coordinator)."""

        def __new__(cls, device=None, priority=0, **kwargs):
            if kwargs.get("stream_id") is not None:
                return super().__new__(cls, priority=priority, **kwargs)
            index = api._index(device)
            return super().__new__(cls, stream_id=api.shim.phantora_new_stream_id(), device_index=index,
                                   device_type=_CUDA_DEVICE_TYPE)

        @property
        def key(self) -> tuple[int, int]:
            return (self.device_index, self.stream_id)

        @property
        def cuda_stream(self) -> int:
            return 0x1000 + self.stream_id if self.stream_id else 0

        def wait_event(self, event) -> None:
            if isinstance(event, Event) and event.event_id is not None:
                with session.lock:
                    link.wait_event(session.stream_id(self.key), event.event_id)

        def wait_stream(self, stream) -> None:
            with session.lock:
                link.wait_stream(session.stream_id(self.key), session.stream_id((stream.device_index, stream.stream_id)))

        def record_event(self, event=None):
            event = event if event is not None else Event()
            event.record(self)
            return event

        def query(self) -> bool:
            with session.lock:
                session.host_work(session.host.query_ns(), "queries")
                done = link.query("stream", stream_id=session.stream_id(self.key)) is not None
                if done:
                    session.stream_reached(self.key)
                return done

        def synchronize(self) -> None:
            session.synchronize_stream(self.key)

        def __eq__(self, other) -> bool:
            return isinstance(other, torch.Stream) and (other.device_index, other.stream_id) == self.key

        def __hash__(self) -> int:
            return hash(self.key)

        def __repr__(self) -> str:
            return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.cuda_stream:#x}>"

    class Event:
        """A CUDA event: marks a point of a stream; the coordinator knows when the stream reaches it."""

        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                     external: bool = False) -> None:
            self.enable_timing = enable_timing
            self.event_id: int | None = None
            self.device: torch.device | None = None
            self._stream: tuple[int, int] | None = None
            self._mark = 0
            """The stream it was last recorded on and the allocator's event mark then (Session.stream_reached)."""

        def record(self, stream=None) -> None:
            stream = stream if stream is not None else torch.cuda.current_stream()
            key = (stream.device_index, stream.stream_id)
            with session.lock:
                if self.event_id is None:
                    self.event_id = link.new_event_id()
                link.record_event(self.event_id, session.stream_id(key))
                self._stream, self._mark = key, session.event_mark(key)
            self.device = torch.device("cuda", stream.device_index)

        def _reached(self) -> None:
            if self._stream is not None:
                session.stream_reached(self._stream, self._mark)

        def wait(self, stream=None) -> None:
            stream = stream if stream is not None else torch.cuda.current_stream()
            stream.wait_event(self)

        def query(self) -> bool:
            if self.event_id is None:
                return True
            with session.lock:
                session.host_work(session.host.query_ns(), "queries")
                done = link.query("event", event_id=self.event_id) is not None
                if done:
                    self._reached()
                return done

        def synchronize(self) -> None:
            if self.event_id is not None:
                with session.lock:
                    link.sync("event", event_id=self.event_id)
                    self._reached()

        def elapsed_time(self, end_event: "Event") -> float:
            if not (self.enable_timing and end_event.enable_timing):
                raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
            if self.event_id is None or end_event.event_id is None:
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            with session.lock:
                start_ns = link.query("event", event_id=self.event_id)
                end_ns = link.query("event", event_id=end_event.event_id)
            if start_ns is None or end_ns is None:  # as cudaEventElapsedTime: cudaErrorNotReady
                raise RuntimeError("CUDA error: device not ready")
            return (end_ns - start_ns) / 1e6

        def ipc_handle(self):
            raise NotImplementedError("phantora: CUDA IPC event handles are not supported")

        @property
        def cuda_event(self) -> int:
            return id(self)

        def __repr__(self) -> str:
            return f"<torch.cuda.Event {self.event_id}>" if self.event_id is not None else "<torch.cuda.Event uninitialized>"

    return Stream, Event


def _install_native_events(api: CudaApi) -> list:
    """Events PyTorch's C++ code makes (autograd's cross-stream syncs, CUDA futures) reach the
    coordinator like Python ones (csrc Note [Events made in C++])."""
    session, link = api.session, api.session.link

    def record(event_id: int, device: int, stream: int) -> None:
        with session.lock:
            link.record_event(event_id, session.stream_id((device, stream)))

    def block(event_id: int, device: int, stream: int) -> None:
        with session.lock:
            link.wait_event(session.stream_id((device, stream)), event_id)

    def event_done(event_id: int, query: int) -> int:
        with session.lock:
            if query:
                session.host_work(session.host.query_ns(), "queries")
                return int(link.query("event", event_id=event_id) is not None)
            link.sync("event", event_id=event_id)
            return 1

    def stream_done(device: int, stream: int, query: int) -> int:
        if stream < 0:
            session.synchronize_device(device)
        elif query:
            with session.lock:
                session.host_work(session.host.query_ns(), "queries")
                return int(link.query("stream", stream_id=session.stream_id((device, stream))) is not None)
        else:
            session.synchronize_stream((device, stream))
        return 1

    def elapsed(start_id: int, end_id: int) -> float:
        with session.lock:
            start_ns = link.query("event", event_id=start_id)
            end_ns = link.query("event", event_id=end_id)
        if start_ns is None or end_ns is None:
            raise RuntimeError("CUDA error: device not ready")
        return (end_ns - start_ns) / 1e6

    return native.set_event_callbacks(api.shim, record, block, event_done, stream_done, elapsed)


class PhiloxGenerator(torch.Generator):
    """A CUDA default generator: its state is CUDA's Philox (seed, offset) as 16 bytes, which code
    such as DTensor's RNG tracker reads and edits. No random values are drawn on a simulated GPU; only
    a drawn routing choice advances the offset (Note [Simulated routing] in runtime/routing.py)."""

    def __init__(self, device: int) -> None:
        super().__init__()
        self._seed = 67280421310721  # CUDA's default seed
        self._offset = 0
        self.device_index = device

    def get_state(self) -> torch.Tensor:
        # the seed is an unsigned 64-bit number (TorchTitan seeds above 2**63); its bytes as int64
        signed = self._seed - (1 << 64) if self._seed >= 1 << 63 else self._seed
        with torch._C._DisableTorchDispatch():
            return torch.tensor([signed, self._offset], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state: torch.Tensor) -> "PhiloxGenerator":
        with torch._C._DisableTorchDispatch():
            seed, offset = state.detach().cpu().contiguous().view(torch.int64).tolist()
        self._seed, self._offset = seed & 0xFFFF_FFFF_FFFF_FFFF, offset
        return self

    def manual_seed(self, seed: int) -> "PhiloxGenerator":
        self._seed, self._offset = int(seed) & 0xFFFF_FFFF_FFFF_FFFF, 0
        return self

    def seed(self) -> int:
        self._seed = int.from_bytes(__import__("os").urandom(8), "little") >> 1
        return self._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_offset(self) -> int:
        return self._offset

    def set_offset(self, offset: int) -> "PhiloxGenerator":
        self._offset = offset
        return self


class _Cudart:
    """The parts of `torch.cuda.cudart()` scripts call."""

    def __init__(self, api: CudaApi) -> None:
        self._api = api

    def cudaMemGetInfo(self, device: int) -> tuple[int, int]:
        return self._api.mem_get_info(device)

    def cudaProfilerStart(self) -> int:
        return 0

    def cudaProfilerStop(self) -> int:
        return 0

    def cudaGetErrorString(self, code) -> str:
        return "no error"


class _Nvtx:
    """NVTX ranges and marks (`torch.cuda.nvtx`, DeepSpeed's every forward): on a GPU they only annotate a
    profiler's timeline, so here they keep their nesting depth and cost nothing."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._next_handle = itertools.count(1)

    def rangePushA(self, message: str) -> int:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        return depth

    def rangePop(self) -> int:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            return -1  # NVTX's answer to a pop with no open range
        self._local.depth = depth - 1
        return depth - 1

    def rangeStartA(self, message: str) -> int:
        return next(self._next_handle)

    def rangeEnd(self, handle: int) -> None:
        pass

    def markA(self, message: str) -> None:
        pass

    def deviceRangeStart(self, message: str, stream: int = 0) -> object:
        return object()

    def deviceRangeEnd(self, handle: object, stream: int = 0) -> None:
        pass


def _unsupported(feature: str):
    def fail(*args, **kwargs):
        raise NotImplementedError(f"phantora: {feature} is not supported yet")
    return fail


def _unsupported_class(name: str, module: str, feature: str) -> type:
    """A stand-in for an unsupported `torch.cuda` class: naming it works as in PyTorch (type annotations such as
    `torch.cuda.CUDAGraph | None` evaluated at import, `isinstance` checks); making one raises."""

    def refuse(cls, *args, **kwargs):
        raise NotImplementedError(f"phantora: {feature} is not supported yet")

    return type(name, (), {"__new__": refuse, "__module__": f"torch.cuda.{module}",
                           "__doc__": f"Not supported under Phantora: {feature}."})


def _unsupported_jit(feature: str):
    """Libraries make jiterator kernels when they are imported and call them later: the call raises."""
    return lambda *args, **kwargs: _unsupported(feature)


UNSUPPORTED_CLASSES = {
    ("memory", "MemPool"): "memory pools (torch.cuda.MemPool)",
    ("streams", "ExternalStream"): "streams made outside PyTorch (torch.cuda.ExternalStream)",
}
"""`torch.cuda.<module>.<name>` classes a simulated GPU cannot stand in for -> what the error names."""

UNSUPPORTED_FUNCTIONS = {
    ("memory", "use_mem_pool"): "memory pools (torch.cuda.use_mem_pool)",
    ("memory", "caching_allocator_alloc"): "raw allocations (torch.cuda.caching_allocator_alloc)",
    ("memory", "caching_allocator_delete"): "raw allocations (torch.cuda.caching_allocator_delete)",
}
"""Functions likewise; each raises when called."""

UNSUPPORTED_JIT = {
    ("jiterator", "_create_jit_fn"): "jiterator kernels (torch.cuda.jiterator)",
    ("jiterator", "_create_multi_output_jit_fn"): "jiterator kernels (torch.cuda.jiterator)",
}
"""Kernel factories: making a kernel works, launching it raises."""


def _install_unsupported() -> None:
    """Replace every name of the tables above, in its module and where `torch.cuda` re-exports it."""
    import importlib
    cuda = torch.cuda
    stand_ins = {**{key: _unsupported_class(key[1], key[0], feature) for key, feature in UNSUPPORTED_CLASSES.items()},
                 **{key: _unsupported(feature) for key, feature in UNSUPPORTED_FUNCTIONS.items()},
                 **{key: _unsupported_jit(feature) for key, feature in UNSUPPORTED_JIT.items()}}
    for (module_name, name), stand_in in stand_ins.items():
        module = importlib.import_module(f"torch.cuda.{module_name}")
        if not hasattr(module, name):  # not in this PyTorch
            continue
        setattr(module, name, stand_in)
        if hasattr(cuda, name):
            setattr(cuda, name, stand_in)


def install(api: CudaApi) -> None:
    """Make `torch.cuda` describe the simulated GPU(s). Call once, before user code runs."""
    import torch._dynamo  # noqa: F401 - see notes: it imports CUDA names that must still be absent
    session = api.session
    C = torch._C
    alloc = api.allocator
    functions: dict[str, Any] = {
        "_cuda_getDeviceCount": lambda: api.count,
        "_cuda_init": lambda: None,
        "_cuda_getDevice": api.current_device,
        "_cuda_setDevice": api.set_device,
        "_cuda_exchangeDevice": api.exchange_device,
        "_cuda_maybeExchangeDevice": api.maybe_exchange_device,
        "_cuda_getArchFlags": lambda: "sm_80 sm_86 sm_90 sm_100 sm_120",
        "_cuda_getCompiledVersion": lambda: int(CUDA_VERSION.replace(".", "")) * 100,
        "_cuda_synchronize": lambda: api.synchronize(None),
        "_cuda_getCurrentStream": api.current_stream_tuple,
        "_cuda_getDefaultStream": lambda device=None: (0, api._index(device), _CUDA_DEVICE_TYPE),
        "_cuda_setStream": api.set_stream,
        "_cuda_getCurrentRawStream": lambda device=None: api.current_stream_tuple(device)[0],
        "_cuda_hasPrimaryContext": lambda device: True,
        "_cuda_isInBadFork": lambda: False,
        "_cuda_canDeviceAccessPeer": lambda a, b: True,
        "_cuda_get_sync_debug_mode": lambda: 0,
        "_cuda_set_sync_debug_mode": lambda mode: None,
        "_cuda_isCurrentStreamCapturing": lambda: False,
        "_cuda_ipc_collect": lambda: None,
        "_cuda_clearCublasWorkspaces": lambda: api.recorder.memory.clear_cublas_workspaces(),
        "_cuda_getCurrentBlasHandle": lambda: 0,
        "_cuda_memoryStats": lambda device: alloc(device).memory_stats(),
        "_cuda_resetPeakMemoryStats": lambda device: alloc(device).reset_peak_stats(),
        "_cuda_resetAccumulatedMemoryStats": lambda device: alloc(device).reset_accumulated_stats(),
        "_cuda_emptyCache": api.empty_cache,
        "_cuda_memorySnapshot": lambda *a, **k: {"segments": [s for i in range(api.count) for s in alloc(i).snapshot()],
                                                  "device_traces": [[] for _ in range(api.count)]},
        "_cuda_setMemoryFraction": lambda fraction, device: alloc(device).set_memory_fraction(fraction),
        "_cuda_getMemoryFraction": lambda device: alloc(device).memory_fraction,
        "_cuda_record_memory_history": lambda *a, **k: session.warn_once(
            "memory_history", "torch.cuda.memory._record_memory_history is ignored"),
        "_cuda_sleep": lambda cycles: None,
        "_host_emptyCache": lambda: None,  # the pinned host allocator's cache (not modelled); torch.cuda.graph calls it
    }
    for name, fn in functions.items():
        setattr(C, name, fn)

    cuda = torch.cuda
    Stream, Event = _make_stream_classes(api)
    get_properties = lambda device: api.properties[api._index(device)]  # noqa: E731
    replacements = {
        "_get_device_properties": get_properties,
        "_exchange_device": api.exchange_device,
        "_maybe_exchange_device": api.maybe_exchange_device,
        "_CudaDeviceProperties": DeviceProperties,
        "_cudart": _Cudart(api),
        "default_generators": tuple(PhiloxGenerator(i) for i in range(api.count)),
        "Stream": Stream,
        "Event": Event,
        "device_count": lambda: api.count,
        "_cached_device_count": api.count,
    }
    for name, value in replacements.items():
        setattr(cuda, name, value)
    cuda.streams.Stream, cuda.streams.Event = Stream, Event
    _install_unsupported()
    cuda_graphs.install(session, api.recorder)  # Note [Simulated CUDA graphs]
    cuda.nvtx._nvtx = _Nvtx()
    sys.modules["torch.cuda"].memory.mem_get_info = api.mem_get_info
    cuda.mem_get_info = api.mem_get_info
    torch.version.cuda = CUDA_VERSION
    torch.backends.cuda.is_built = lambda: True
    api.native_event_callbacks = _install_native_events(api)
    cuda.init()
