"""Entry point of a rank process: install the simulated GPU, run the user's script, report.

Run as `python -m phantora.runtime.bootstrap SCRIPT ARGS...` (or `-m MODULE ARGS...`) with the
rank's configuration in $PHANTORA_RUN_CONFIG; the CLI does this. The script runs as `__main__`
with `sys.argv` exactly as the user wrote it.

Note: [The collector and the runtime's objects]
Importing torch and installing the runtime leave about 310,000 Python objects that live as long as the rank.
Python's cyclic collector walks every object it tracks in each full collection, and a training loop's
allocations start one every 20-40 steps of nanoGPT: 0.13-0.18 s of CPU each, over objects that can never be
garbage. `gc.freeze()` once the runtime is installed moves them to the permanent generation, which collections
skip: a full collection then walks the program's own objects alone (6 ms for nanoGPT, 25 ms with Transformers
imported). The fork server freezes what it imported before it forks (runtime/zygote.py), so that the ranks'
collections also leave those pages unwritten and shared. The program's objects are collected as before; only
the moments of full collections move (each frees what it finds unreachable, as before).
"""

from __future__ import annotations

import gc
import os
import runpy
import sys
import traceback

from typing import TYPE_CHECKING

from phantora.config.run import RankConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from phantora.runtime.session import Session
    from phantora.transport.client import RankClient
    from phantora.transport.wire import RankStatus


RUNTIME_MODULES = ("cuda_api", "distributed", "functional_collectives", "native", "triton_kernels", "clock", "compile",
                   "dispatch", "extensions", "handlers", "library_probes", "kernels", "modules", "module_calls",
                   "python_costs", "python_prices", "session", "sdpa", "storage", "host_time", "rank_result")
"""The runtime's modules a rank imports before its program runs (`install`, `main`): what the fork server
imports once for every rank (runtime/zygote.py)."""


def install(config: RankConfig):
    """Install the fake CUDA device, interception and virtual clock into this process."""
    import torch

    from phantora.runtime import cuda_api, distributed, functional_collectives, native, triton_kernels
    from phantora.runtime.clock import VirtualClock
    from phantora.runtime.compile import install_compile
    from phantora.runtime.dispatch import HybridMode, KernelRecorder, RecordingFakeMode
    from phantora.runtime.extensions import install_extension_stand_ins
    from phantora.runtime.handlers import HANDLERS, install_tolist
    from phantora.runtime.library_probes import install_library_probes
    from phantora.runtime.kernels import register_cuda_redispatch, register_cuda_kernels_for_composite_ops
    from phantora.runtime.modules import install_foreach_support, install_module_conversion
    from phantora.runtime.python_costs import install_python_costs
    from phantora.runtime.python_prices import install_python_prices
    from phantora.runtime.session import Session
    from phantora.runtime.sdpa import install_sdpa_routing
    from phantora.runtime.steps import install_step_marks
    from phantora.runtime.storage import install_addresses, install_storage_resize_hook

    shim = native.load_shim()
    if not shim.phantora_install(config.devices_per_process):
        raise RuntimeError("phantora: could not install the fake CUDA device into this PyTorch build")
    client, flush_interval_s = connect(config)
    session = Session(config, client, flush_interval_s)
    client.status = status_source(session)
    recorder = KernelRecorder(session, shim)
    cuda_api.install(cuda_api.CudaApi(session, shim, recorder))
    register_cuda_kernels_for_composite_ops()
    register_cuda_redispatch()
    install_module_conversion()
    install_foreach_support()
    install_tolist()
    priced = None
    if session.host_timer is None:  # measured host time replaces these costs (runtime/host_time.py)
        install_python_costs(session)
        priced = install_python_prices(session)
    torch._C._set_only_lift_cpu_tensors(True)
    distributed.install(session, recorder)
    fake_mode = RecordingFakeMode(recorder)
    mode = HybridMode(fake_mode, {**HANDLERS, **functional_collectives.handlers()},
                      priced=priced.code if priced is not None else None)
    functional_collectives.install(fake_mode)
    install_sdpa_routing(session)
    install_compile(session, recorder)
    install_storage_resize_hook(recorder)
    install_addresses(recorder)
    install_extension_stand_ins()
    install_library_probes(RecordingFakeMode)
    triton_kernels.install(recorder)
    install_step_marks(session)
    VirtualClock(session.now_ns, session.host_wait).install()
    mode.__enter__()
    native.install_fast_device_queries(mode)
    if session.host_timer is not None:  # the program's own CPU time counts from here (runtime/host_time.py)
        from phantora.runtime.host_time import start_measuring
        start_measuring(session.host_timer, mode)
    return session


def status_source(session: Session) -> Callable[[], RankStatus]:
    """What the launcher should know of this rank should it die or hang (transport/wire.py `RankStatus`), read by
    the rank's client before every batch."""
    from phantora.runtime import distributed
    from phantora.transport.wire import RankStatus

    def status() -> RankStatus:
        peaks = tuple((a.run_peak_allocated_bytes, a.run_peak_reserved_bytes) for a in session.allocators)
        work = distributed.last_work
        return RankStatus(peaks) if work is None else RankStatus(peaks, *work)
    return status


def connect(config: RankConfig) -> tuple[RankClient, float]:
    """The transport to the launcher's coordinator, and the flush interval it needs."""
    from phantora.transport.client import RankClient

    if not config.coordinator:
        raise RuntimeError("phantora: this rank has no coordinator to connect to: start scripts with `phantora run`")
    return RankClient.connect(config.coordinator, rank=config.rank), 0.01


def run_user_program(argv: list[str]) -> int:
    """Run `argv` (a script path or `-m module`, then its arguments) as __main__; return its exit code."""
    if argv and argv[0] == "-m":
        module, sys.argv = argv[1], [argv[1], *argv[2:]]
        runner = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        script = argv[0]
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
        runner = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
    try:
        runner()
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


_PR_SET_PDEATHSIG = 1
LAUNCHER_PID_ENV_VAR = "PHANTORA_LAUNCHER_PID"
"""The launcher's pid: the parent a rank must die with (`die_with_parent`)."""


def die_with_parent() -> None:
    """Have the kernel SIGKILL this rank when the launcher dies, however it dies (Linux `PR_SET_PDEATHSIG`; cli/
    processes.py Note [When the launcher itself is killed]); exit at once if it is gone already."""
    launcher = os.environ.get(LAUNCHER_PID_ENV_VAR)
    if not launcher or sys.platform != "linux":
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(launcher):  # it died before the request took effect
        os._exit(1)


def main() -> int:
    die_with_parent()
    config = RankConfig.from_env()
    argv = sys.argv[1:]
    if not argv:
        print("phantora: no script given", file=sys.stderr)
        return 2
    session = install(config)
    gc.freeze()  # Note [The collector and the runtime's objects]
    code = run_user_program(argv)
    if session.host_timer is not None:
        session.host_timer.stop()  # measured host time ends with the program
    from phantora.runtime.rank_result import write_rank_result
    from phantora.runtime import native
    native.load_shim().phantora_clear_event_callbacks()
    native.load_shim().phantora_fast_device_uninstall()
    try:
        if code == 0:  # a failed program just disconnects: the launcher then names this rank as the cause
            session.finish()
    finally:
        write_rank_result(session, exit_code=code)
    if code == 0:
        from phantora.runtime.distributed import wait_for_every_rank_to_end
        wait_for_every_rank_to_end()
    return code


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: fake tensors, finalizers and the native shim gain nothing from it.
    os._exit(code)
