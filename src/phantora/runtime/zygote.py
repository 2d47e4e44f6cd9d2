"""The fork server's process: imports torch and the runtime once, then forks a rank process per request.

    python -m phantora.runtime.zygote FD       # started by cli/fork_server.py; FD: its end of a socket pair

Note: [A rank forked from the zygote is a rank started by exec]
A rank process started directly (`python -m phantora.runtime.bootstrap PROGRAM`) spends about 4 s of CPU
importing torch, dynamo and the runtime before the program runs, the same 4 s in every rank. The zygote
does that once and forks each rank from it; a rank then begins where the direct one would be after its
imports. Everything a rank can observe must be as if it had been started directly:
- the environment: the zygote runs with the ranks' common environment (what torch and the C libraries read
  at start-up: PYTHON*, TORCH_*, ...); a request carries the rank's own, which differs only in variables
  read later (cli/fork_server.py `PER_RANK`), set into `os.environ` (and the C environment with it), with
  what the imports set there (`imported_environment`);
- threads: the zygote imports torch with one OpenMP thread, so that no thread pool exists when it forks,
  and each rank sets torch's intra-op thread count its environment gives (`torch.set_num_threads`, which
  is what torch takes from OMP_NUM_THREADS / MKL_NUM_THREADS at start-up); OpenMP starts its pool in the
  rank, at its first parallel operation;
- the process: a new process group (as `Popen(process_group=0)`), the launcher as its parent (the zygote
  forks twice and the middle process exits, so the rank is reparented to the launcher, the child subreaper
  of its ranks: the launcher waits for it and gets its exit status and resource usage, as for a rank it
  started), `PR_SET_PDEATHSIG` once that is so, its own working folder, and only the three standard
  descriptors, which the request passes (SCM_RIGHTS): the launcher's pipes, its console or /dev/null;
- Python: `sys.stdout`/`sys.stderr` buffered as the interpreter would have chosen for those descriptors,
  `sys.path[0]` the working folder (as `python -m`), fresh random seeds (`random` reseeds itself at fork;
  NumPy's global generator and multiprocessing's authentication key are renewed), the simulated clock
  (runtime/clock.py gives a process forked from a rank the real one), then `bootstrap.main()`
  with `sys.argv` the program's, so `runpy` runs it as `__main__` as the direct rank does.
A process with threads cannot fork safely (a lock held by another thread stays held in the child), so the
zygote refuses to start if importing left any thread running.
On a CUDA build of torch, asking for the device count (`torch.cuda.is_available()`, which importing
`torch.utils.cpp_extension` does) marks every later fork of the process as a "bad fork" in which CUDA cannot be
initialised; the simulated CUDA layer of a rank initialises it (runtime/cuda_api.py). So the zygote asks in a
throwaway child and answers its imports with that count (`_device_count_asked_apart`): the rank, like a rank
started by exec, asks for real when it asks.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import socket
import sys
from collections.abc import Callable, Iterator

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Set for the zygote's own start (cli/fork_server.py), never the ranks'."""

imported_environment: tuple[dict[str, str], set[str]] = ({}, set())
"""What importing torch and the runtime set in and removed from `os.environ` (torch's inductor names its cache
folder there): a rank that imports them itself has it, so a forked one gets it."""


LATE_IMPORTS = ("torch._dynamo", "torch.distributed.distributed_c10d", "torch.distributed._functional_collectives",
                 "torch.distributed.utils", "torch.distributed.tensor", "torch.distributed.fsdp",
                 "torch.nn.parallel.distributed", "torch.utils.cpp_extension", "torch.optim.optimizer",
                 "torch.utils._foreach_utils", "phantora.transport.client", "encodings.idna")
"""What the runtime's install imports when it runs (dynamo first: cuda_api.py `install`) and its connection to the
coordinator, beyond what the runtime's modules import when they are loaded."""


def preload() -> None:
    """Import what every rank imports before the program runs (runtime/bootstrap.py `install`), and nothing that
    depends on the rank; load the native shim."""
    import importlib

    from phantora.runtime import bootstrap, native

    with _device_count_asked_apart():
        for name in [*(f"phantora.runtime.{module}" for module in bootstrap.RUNTIME_MODULES), *LATE_IMPORTS]:
            importlib.import_module(name)  # in the order a rank imports them
        native.load_shim()


@contextlib.contextmanager
def _device_count_asked_apart() -> Iterator[None]:
    """While importing, torch's CUDA device count is the one a throwaway child got (Note [A rank forked from the
    zygote is a rank started by exec]): asking in this process would make every rank a bad fork."""
    import torch

    asked = getattr(torch._C, "_cuda_getDeviceCount", None)
    if asked is None:  # a CPU build: nothing to ask, nothing marked
        yield
        return
    count = _in_a_child(asked)
    torch._C._cuda_getDeviceCount = lambda: count
    try:
        yield
    finally:
        torch._C._cuda_getDeviceCount = asked


def _in_a_child(ask: Callable[[], int]) -> int:
    """`ask()` run in a child process that exits at once; its answer."""
    return int(answer_of_child(lambda write: str(ask())) or 0)


def answer_of_child(child: Callable[[int], str]) -> str:
    """Fork a child that runs `child(write)` and exits at once; what it returned ("" if it failed). `write` is the
    answer pipe's end, which a process the child forks must close: the answer ends when every copy is closed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, child(write).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    return text.decode()


def threads() -> int:
    """The OS threads of this process (torch may start some of its own, which `threading` does not see)."""
    return len(os.listdir("/proc/self/task"))


def serve(sock: socket.socket) -> None:
    """Answer each request (argv, environment, working folder; the three descriptors) with the forked rank's pid,
    until the launcher closes its end."""
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        except OSError:
            return
        if not data:
            return
        try:
            argv, env, cwd, intra_op = pickle.loads(data)
            if threads() != 1:
                raise RuntimeError(f"the fork server has {threads()} threads: forking it is not safe")
            answer: object = spawn(sock, argv, env, cwd, fds, intra_op)
        except Exception as error:  # the launcher reports it as why the rank could not start
            answer = f"{type(error).__name__}: {error}"
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(pickle.dumps(answer))


def spawn(sock: socket.socket, argv: list[str], env: dict[str, str], cwd: str, fds: list[int], intra_op: int) -> int:
    """Fork the rank through a middle process that exits at once, so the launcher adopts it; its pid."""

    def fork_rank(write: int) -> str:
        middle_pid = os.getpid()
        rank = os.fork()
        if rank == 0:
            os.close(write)
            become_rank(sock, argv, env, cwd, fds, intra_op, middle_pid)
        return str(rank)

    pid = answer_of_child(fork_rank)
    if not pid:
        raise RuntimeError("the fork server could not fork a rank")
    return int(pid)


def become_rank(sock: socket.socket, argv: list[str], env: dict[str, str], cwd: str, fds: list[int],
                intra_op: int, middle: int) -> None:
    """In the forked process: become what `Popen([python, -m, bootstrap, *argv], env=env, cwd=cwd,
    process_group=0, stdin/stdout/stderr=fds, close_fds=True)` would have started, with torch's intra-op thread
    count `intra_op` (what its environment gives) and `middle` the process that forked it; never returns."""
    code = 1
    try:
        sock.close()
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        while os.getppid() == middle:  # until the middle process is gone and the launcher adopted this one
            os.sched_yield()
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update({k: v for k, v in env.items() if k not in imported_environment[1]})
        os.environ.update(imported_environment[0])
        sys.path[0] = cwd
        _fresh_python_state(intra_op)
        from phantora.runtime import bootstrap

        sys.argv = [bootstrap.__file__, *argv]
        code = bootstrap.main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _fresh_python_state(intra_op: int) -> None:
    """What a new interpreter would have that the zygote's forks share (Note [A rank forked from the zygote ...])."""
    import torch

    from phantora.runtime import clock

    clock.forked_as_rank()  # the clock module takes every fork for a rank's child (a DataLoader worker)
    torch.set_num_threads(intra_op)  # the zygote imported torch with one (OpenMP starts its pool in the rank)
    if not sys.stdout.write_through:  # buffered: by lines on a terminal, as the interpreter decides at start-up
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        multiprocessing.current_process().authkey = os.urandom(32)


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    from phantora.runtime.bootstrap import die_with_parent

    die_with_parent()
    global imported_environment
    before = dict(os.environ)
    preload()
    after = {k: v for k, v in os.environ.items() if k not in _THREAD_VARIABLES}
    imported_environment = ({k: v for k, v in after.items() if before.get(k) != v},
                            {k for k in before if k not in after and k not in _THREAD_VARIABLES})
    count = threads()
    if count != 1:
        sock.send(pickle.dumps(f"importing torch and the runtime left {count} threads running; a process with "
                               "threads cannot fork safely"))
        return 1
    gc.freeze()  # bootstrap.py Note [The collector and the runtime's objects]
    sock.send(pickle.dumps("ready"))
    serve(sock)
    return 0


if __name__ == "__main__":
    os._exit(main())  # no interpreter teardown: nothing of torch's needs it, and it takes seconds
