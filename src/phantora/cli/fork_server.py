"""The launcher's end of the fork server (runtime/zygote.py): rank processes forked from one that imported torch.

    forks = ForkServer(job_id)                          # one per launch, shared by the runs of representative ranks
    if forks.enabled: proc = forks.spawn(argv, env, stdin=fd, stdout=fd, stderr=fd)   # a ForkedRank
    forks.close()

The zygote starts with the first request, in the environment of that rank less its `PER_RANK` variables,
and takes about as long as one rank took to start; every later rank then costs a fork and the runtime's
install. Ranks whose environment does not give torch's thread count (OMP_NUM_THREADS, which torchrun sets
to 1 with several ranks per node) are started by exec (`intra_op_threads`). It is on by default (`DEFAULT`);
with `PHANTORA_FORK_SERVER=0` every rank is started by exec (`python -m phantora.runtime.bootstrap`), as on
systems other than Linux. What a rank sees either way is the same (Note [A rank forked from the zygote is a
rank started by exec] in runtime/zygote.py).
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

FORK_SERVER_ENV_VAR = "PHANTORA_FORK_SERVER"
"""`1` (default): fork ranks from the fork server; `0`: start every rank by exec."""
DEFAULT = "1"

PER_RANK = frozenset({
    # torchrun's worker variables (cli/launch.py TorchrunEnv), DeepSpeed's (DeepSpeedEnv)
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "CUDA_VISIBLE_DEVICES", "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE",
    # Phantora's own (config/run.py, transport/client.py, cli/processes.py)
    "PHANTORA_RUN_CONFIG", "PHANTORA_COORDINATOR_TOKEN",
})
"""Variables that differ between the ranks of a job and are read only after start-up (by c10d, torchrun's
@record, torch.cuda's device count, Phantora's runtime), never while torch is imported: a rank forked from a
zygote with other values of these is the rank an exec would start."""


class ForkServerError(RuntimeError):
    """The fork server could not start or fork (the message says why; the launcher reports it)."""


@dataclass(slots=True, eq=False)
class ForkedRank:
    """A rank process forked by the fork server: what the launcher uses of a `subprocess.Popen`."""

    pid: int
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None
    returncode: int | None = None


def fork_server_enabled(environ: Mapping[str, str]) -> bool:
    value = environ.get(FORK_SERVER_ENV_VAR, DEFAULT)
    if value not in ("0", "1"):
        raise ForkServerError(f"{FORK_SERVER_ENV_VAR} must be 0 or 1, got {value!r}")
    return value == "1" and sys.platform == "linux"


class ForkServer:
    """The zygote of one launch, started on the first `spawn`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._env: dict[str, str] | None = None

    def can_fork(self, env: Mapping[str, str]) -> bool:
        """Whether a rank with this environment can be forked from the zygote: it sets torch's thread count (see
        `intra_op_threads`) and shares the zygote's start-up environment."""
        return intra_op_threads(env) is not None and (self._env is None or common_environment(env) == self._env)

    def spawn(self, argv: list[str], env: Mapping[str, str], *, stdin: int, stdout: int, stderr: int) -> int:
        """Fork a rank running `python -m phantora.runtime.bootstrap *argv` with `env`, in this process's working
        folder, its standard descriptors these; its pid (this process, the subreaper, is its parent)."""
        if self._sock is None:
            self._start(common_environment(env))
        message = pickle.dumps((argv, dict(env), os.getcwd(), intra_op_threads(env)))
        try:
            socket.send_fds(self._sock, [message], [stdin, stdout, stderr])
            answer = pickle.loads(self._sock.recv(1 << 16) or pickle.dumps("the fork server ended"))
        except OSError as error:
            raise ForkServerError(f"the fork server is gone ({error})") from None
        if not isinstance(answer, int):
            raise ForkServerError(str(answer))
        return answer

    def _start(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # one OpenMP thread while torch is imported: a pool started then would be threads the forks cannot have;
        # each rank sets its own count (runtime/zygote.py)
        start_env = {**{k: v for k, v in env.items() if k != "MKL_NUM_THREADS"}, "OMP_NUM_THREADS": "1"}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "phantora.runtime.zygote", str(theirs.fileno())],
                                         env=start_env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                         process_group=0)  # Ctrl-C at a terminal is the launcher's to handle
        finally:
            theirs.close()
        self._sock, self._env = ours, env
        answer = ours.recv(1 << 16)
        if answer != pickle.dumps("ready"):
            why = pickle.loads(answer) if answer else f"it exited with code {self.proc.wait()}"
            raise ForkServerError(f"the fork server did not start: {why} (set {FORK_SERVER_ENV_VAR}=0 to start "
                                  "every rank by exec)")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.proc is not None:
            self.proc.wait()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def intra_op_threads(env: Mapping[str, str]) -> int | None:
    """The intra-op thread count torch takes from the environment when it starts (`intraop_default_num_threads`:
    MKL_NUM_THREADS, else OMP_NUM_THREADS); None where neither is a positive count, and torch would count the
    machine's cores: such ranks are started by exec, as importing torch then starts OpenMP's threads."""
    for name in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def common_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a rank's environment every rank of the job shares: the zygote's."""
    return {k: v for k, v in env.items() if k not in PER_RANK}
