"""CUDA graphs on the simulated GPU: capture records kernels, replay launches them all at once.

Note: [Simulated CUDA graphs]
`torch.cuda.CUDAGraph` is Phantora's (`make_graph_class`); PyTorch's own `torch.cuda.graph` context,
`make_graphed_callables` and `graph_pool_handle` run on top of it as on a GPU. Between `capture_begin` and
`capture_end` the program runs as during a real capture: its Python, the dispatcher and each launch cost host
time, ops on fake tensors give outputs (the graph's static outputs, allocated then and kept as long as they
live), and no kernel reaches the GPU: each kernel issued on the capturing stream is recorded in the graph
(`Session.graph_capture`). `replay()` costs the host one launch (`cudaGraphLaunch`, `HostConstants.launch_ns`)
for the whole graph and puts the recorded kernels, in order, on the current stream, with no host cost of
their own: a host-bound step becomes GPU-bound as on a GPU.

`torch.compile(mode="reduce-overhead")` (Inductor's CUDA graph trees) is simulated the same way: each run of a
compiled graph costs one launch, plus a copy kernel for each forward input that is not a parameter or buffer
(cudagraph trees copy those into the graph's static inputs); runtime/inductor.py `PlannedGraph`.

Not simulated (a one-line error names them): capture of work on a stream other than the capturing one
(multi-stream capture), NCCL calls and events inside a capture. The graph's private memory pool is not modelled:
memory freed during capture returns to the common pool.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from phantora.runtime.dispatch import KernelRecorder
    from phantora.runtime.session import CostedOp, Session, StreamKey


class GraphCapture:
    """The kernels one capture records, in launch order."""

    def __init__(self, stream: StreamKey) -> None:
        self.stream = stream
        self.kernels: list[CostedOp] = []

    def capture(self, costed: CostedOp, stream: StreamKey) -> bool:
        """Take a kernel issued while capturing (`Session.launch_costed`): True, it is the graph's."""
        if stream != self.stream:
            raise NotImplementedError("phantora: CUDA graph capture of work on a stream other than the capturing "
                                      "one (multi-stream capture) is not supported yet")
        self.kernels.append(costed)
        return True


def replay(session: Session, kernels: tuple[CostedOp, ...], stream: StreamKey) -> None:
    """One graph launch: the host pays one launch, the kernels go on `stream` in order."""
    session.host_work(session.host.c.launch_ns, "compiled graphs")
    for costed in kernels:
        session.launch_costed(costed, stream, charge_host=False)


_LINK_CALLS_REFUSED = {"collective": "NCCL calls", "record_event": "events", "wait_event": "events"}
"""What the engine link must not receive during a capture, and the error's words for it."""


def make_graph_class(session: Session, recorder: KernelRecorder) -> type:
    """`torch.cuda.CUDAGraph` for this process (Note [Simulated CUDA graphs])."""
    pools = itertools.count(1)

    def current_stream() -> StreamKey:
        device = torch.cuda.current_device()
        return device, recorder.current_stream_id(device)

    class CUDAGraph:
        """Phantora's `torch.cuda.CUDAGraph`: capture records kernels, replay launches them."""

        __module__ = "torch.cuda.graphs"
        __qualname__ = "CUDAGraph"

        def __init__(self, keep_graph: bool = False) -> None:
            self._kernels: tuple[CostedOp, ...] | None = None
            self._pool = (next(pools), 0)

        def capture_begin(self, pool: Any = None, capture_error_mode: str = "global",
                          check_input_liveness: bool = False) -> None:
            """`check_input_liveness` (a debugging aid against inputs freed before replay): accepted; a simulated
            replay reads no memory, so a freed input cannot corrupt it."""
            if session.graph_capture is not None:
                raise RuntimeError("phantora: a CUDA graph is already capturing (nested captures are not supported)")
            stream = current_stream()
            if stream[1] == 0:
                raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, after capture, "
                                   "it's ok to replay them on the default stream.)")
            if pool is not None:
                self._pool = tuple(pool)
            session.graph_capture = GraphCapture(stream)
            self._refuse_link_calls()

        def capture_end(self) -> None:
            capture = session.graph_capture
            if capture is None:
                raise RuntimeError("phantora: CUDAGraph.capture_end without capture_begin")
            session.graph_capture = None
            self._restore_link_calls()
            self._kernels = tuple(capture.kernels)

        def instantiate(self) -> None:
            if self._kernels is None:
                raise RuntimeError("Called CUDAGraph::instantiate without a preceding successful capture.")

        def replay(self) -> None:
            if self._kernels is None:
                raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
            replay(session, self._kernels, current_stream())

        def reset(self) -> None:
            self._kernels = None

        def pool(self) -> tuple[int, int]:
            return self._pool

        def enable_debug_mode(self) -> None:
            pass

        def debug_dump(self, debug_path: str) -> None:
            with open(debug_path, "w") as f:
                f.write("".join(f"{c.op.name}\n" for c in self._kernels or ()))

        def raw_cuda_graph(self) -> int:
            raise NotImplementedError("phantora: CUDAGraph.raw_cuda_graph (a CUDA driver handle) is not supported")

        raw_cuda_graph_exec = raw_cuda_graph

        def kernel_count(self) -> int:
            """Kernels the graph holds (Phantora's own, for tests and reports)."""
            return len(self._kernels or ())

        @staticmethod
        def _refuse_link_calls() -> None:
            for name, what in _LINK_CALLS_REFUSED.items():
                setattr(session.link, name, _refusal(what))

        @staticmethod
        def _restore_link_calls() -> None:
            for name in _LINK_CALLS_REFUSED:
                delattr(session.link, name)  # the instance attribute: the class's method shows again

    return CUDAGraph


def _refusal(what: str):
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"phantora: {what} inside a CUDA graph capture are not supported yet")
    return refuse


def install(session: Session, recorder: KernelRecorder) -> None:
    """`torch.cuda.CUDAGraph`, and the names `torch.cuda.graphs` bound from the CPU build's stand-ins at import."""
    import torch.cuda.graphs as graphs

    graph_class = make_graph_class(session, recorder)
    handles = itertools.count(1)

    def capturing() -> bool:
        capture = session.graph_capture
        if capture is None:
            return False
        device = torch.cuda.current_device()
        return capture.stream == (device, recorder.current_stream_id(device))

    for module in (graphs, torch.cuda):
        module.CUDAGraph = graph_class
    graphs._graph_pool_handle = lambda: (0, next(handles))
    graphs._cuda_isCurrentStreamCapturing = capturing
    torch._C._cuda_isCurrentStreamCapturing = capturing
    for name, stand_in in _CUDA_BUILD_NAMES.items():  # a CPU build lacks them; Inductor's CUDA graph trees import them
        if not hasattr(torch._C, name):
            setattr(torch._C, name, stand_in)


class _AllocatorState:
    """`torch._C._cuda_CUDAAllocator_AllocatorState`: a checkpoint of a CUDA graph pool (not modelled)."""


_CUDA_BUILD_NAMES = {"_cuda_CUDAAllocator_AllocatorState": _AllocatorState,
                     "_set_cached_tensors_enabled": lambda enabled: None}
"""Names of a CUDA build's `torch._C` that `torch._inductor.cudagraph_trees` imports (Dynamo imports it for compiled
optimizers); their stand-ins on a CPU build."""
