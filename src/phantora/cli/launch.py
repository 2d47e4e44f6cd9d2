"""Run a simulated job: the coordinator server in this process, one rank process per simulated GPU.

    result = launch(config)        # LaunchConfig from cli/main.py (phantora run/torchrun/deepspeed/accelerate)

The steps (`_Launcher.run`): start the coordinator server; spawn every rank process with its
environment (`rank_environment`: the worker variables of the launcher being reproduced, torchrun's
or DeepSpeed's, a framework launcher's additions, and PHANTORA_RUN_CONFIG naming the server);
supervise (`_supervise`): pass their output through, reap exits, watch the server, print progress;
on the first failure or a signal stop every rank (`_stop_ranks`: the signal, a grace period,
SIGKILL); then write the reports from the coordinator's state and the ranks' result files, whatever
state the run ended in (partial results are results).

Note: [Which failure is the root cause]
A crashing rank shows up twice: its process exits non-zero, and the server sees its connection
close before RankFinished ("disconnected"). The server then tells every other rank, which raise
and exit non-zero too, possibly before the culprit's own exit is reaped. A coordinator error
(mismatched collectives, a deadlock) likewise makes every rank exit non-zero. The server records
its failure before it tells any rank, so, reading the server's failure *after* reaping exits:
- a coordinator-side failure is the root cause, except a deadlock that a rank caused by reporting the
  end of its program (RankFinished) and then exiting non-zero (the runtime finishes even a program
  that raised): that rank is;
- a disconnect names the culprit, whatever else exited meanwhile; its process gets
  `_EXIT_GRACE_S` to exit, so its exit code and traceback are in the report;
- with no server failure, the first rank seen exiting non-zero is the culprit (nobody was told
  anything yet, so it failed on its own); if it had reported RankFinished while peers still run, the
  coordinator gets `_EXIT_GRACE_S` to find the deadlock its exit may leave (its process can be
  reaped before the coordinator has processed what the peers sent meanwhile), so the report says so.

Note: [The hang watchdog]
A rank stuck in Python (a loop that never ends, a wait on something that never comes) while its
peers wait for it at a synchronization is no deadlock the coordinator can see: that rank is not
blocked, it just sends nothing. On a real cluster NCCL's watchdog ends such a job: a rank whose
NCCL call has not completed after its process group's timeout (`init_process_group(timeout=...)`,
`new_group(timeout=...)`; 10 minutes by default) reports "[Rank N] Watchdog caught collective
operation timeout: WorkNCCL(...) ran for T milliseconds before timing out" and takes its process
down. Here the launcher watches the server's `activity()`: when some rank has waited for a reply
for its timeout of wall-clock time (that of the group of the last NCCL call it launched, which
each rank reports in its `RankStatus`; `--hang-timeout` replaces it for every group) and every
rank that is neither waiting nor finished (nor exited) is connected and has sent nothing for as
long, those ranks are hung. A rank still starting (not connected yet: importing torch takes
minutes when hundreds of ranks share a few cores) is not taken for hung while a peer is still
starting as well; once every other rank has connected, a rank that has not connected within the
timeout after its process and its last peer's connection started is hung in its start-up (an
import that never returns, a loop before the runtime is installed). The launcher sends the hung
ranks SIGABRT: every rank runs with PYTHONFAULTHANDLER=1, so Python's faulthandler prints each
thread's stack to the rank's stderr before it dies, and that stack is the report's traceback,
after the watchdog's line of each rank that waited. A rank that is merely slow keeps sending
records (each op it runs is one), so it is never taken for hung; a program may legitimately
compute on its CPU for as long as its timeout while its peers wait (a real job would time out as
well).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TextIO

from phantora.cli.fork_server import ForkedRank, ForkServer, ForkServerError, fork_server_enabled
from phantora.cli.failure import CoordinatorFault, RankExit, format_failure_report
from phantora.cli.output import OutputConfig, OutputPump
from phantora.cli.processes import (JOB_ENV_VAR, Guardian, end_leftovers, new_job_id, own_start_ticks,
                                    set_child_subreaper)
from phantora.config.run import CONFIG_ENV_VAR, RankConfig
from phantora.engine.coordinator import Coordinator
from phantora.models.chip_variation import UNIFORM_CHIPS
from phantora.models.network import ClusterNetworkConfig, NetworkSimulator, Topology
from phantora.profiler.oplog import OPS_FILE, merge_rank_ops
from phantora.protocol.symmetry import (BROKEN_SYMMETRY_EXIT_CODE, BROKEN_SYMMETRY_FILE, RankSymmetry, UsedGroup,
                                        best_symmetry)
from phantora.runtime.bootstrap import LAUNCHER_PID_ENV_VAR
from phantora.reports.summary import ProcessUsage, build_summary, print_summary, write_reports
from phantora.specs import DeviceProfile
from phantora.transport.client import TOKEN_ENV_VAR
from phantora.transport.server import CoordinatorServer, ServerFailure
from phantora.transport.wire import RankStatus

if TYPE_CHECKING:
    from phantora.cli.multinode import RendezvousSpec

DEFAULT_RANK_ENTRY: tuple[str, ...] = (sys.executable, "-m", "phantora.runtime.bootstrap")
"""The rank process: the runtime's bootstrap, followed by the program's argv."""
_EXIT_GRACE_S = 2.0
"""How long a failing rank's process gets to exit after the server saw the failure (for its exit code)."""
_DRAIN_TIMEOUT_S = 2.0
DEFAULT_HANG_TIMEOUT_S = 600.0
"""ProcessGroupNCCL's default timeout (torch's `default_pg_nccl_timeout`, 10 min): the hang watchdog's where neither
the program nor `--hang-timeout` sets one."""
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""torchrun's default --signals-to-handle."""


class LaunchError(Exception):
    """The simulation could not be started (printed as one line)."""


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """The user's program: a script path or a module, and its arguments (passed through untouched)."""

    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)
    rank_argument: str | None = None
    """An argument a launcher puts between the script and its arguments for each rank, `{local_rank}`
    filled in (DeepSpeed's `--local_rank={local_rank}`); None: the argv is the same for every rank."""

    def argv(self, local_rank: int = 0) -> list[str]:
        head = ["-m", self.module] if self.module else [self.script]
        per_rank = [self.rank_argument.format(local_rank=local_rank)] if self.rank_argument else []
        return [*head, *per_rank, *self.args]

    @property
    def name(self) -> str:
        """What torchrun's failure report calls it: the script's file name or the module."""
        return self.module or Path(self.script or "program").name


@dataclass(frozen=True, slots=True)
class RankPlace:
    """Where a rank process sits in the job: what a launcher's worker variables are made of."""

    rank: int
    local_rank: int
    nnodes: int
    nproc_per_node: int
    master_port: int
    out_dir: Path
    inherited: Mapping[str, str]
    """The environment the worker inherits before the launcher adds its variables."""

    @property
    def node(self) -> int:
        return self.rank // self.nproc_per_node

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


def process_exit_code(code: int) -> int:
    """A process's exit status as a shell reports it: its own code, or 128 + N when killed by signal N."""
    return code if code >= 0 else 128 - code


@dataclass(frozen=True, kw_only=True, slots=True)
class TorchrunEnv:
    """What torchrun tells its workers beyond their ranks (torch/distributed/elastic/agent/server/
    local_elastic_agent.py, `_start_workers`)."""

    run_id: str = "none"
    role: str = "default"
    max_restarts: int = 0
    master_port: int | None = None
    """Port of rank 0's TCPStore (MASTER_PORT); None: a free port."""
    master_addr: str = "127.0.0.1"
    """MASTER_ADDR: this machine, where every simulated node runs, unless the job spans several launchers
    (cli/multinode.py: node 0's host)."""
    virtual_local_rank: bool = False
    """LOCAL_RANK=0 for every worker, each seeing one GPU (torchrun --virtual-local-rank)."""

    def variables(self, place: RankPlace) -> dict[str, str]:
        env = {
            "RANK": str(place.rank),
            "LOCAL_RANK": "0" if self.virtual_local_rank else str(place.local_rank),
            "WORLD_SIZE": str(place.world_size),
            "LOCAL_WORLD_SIZE": str(place.nproc_per_node),
            "GROUP_RANK": str(place.node),
            "GROUP_WORLD_SIZE": str(place.nnodes),
            "ROLE_RANK": str(place.rank),
            "ROLE_WORLD_SIZE": str(place.world_size),
            "ROLE_NAME": self.role,
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(place.master_port),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": str(self.max_restarts),
            "TORCHELASTIC_RUN_ID": self.run_id,
            # rank 0's init_process_group hosts the TCPStore, as with torchrun's static rendezvous
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": place.inherited.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "TORCHELASTIC_ERROR_FILE": str(place.out_dir / f"rank{place.rank}" / "error.json"),
        }
        if "OMP_NUM_THREADS" not in place.inherited and place.nproc_per_node > 1:
            env["OMP_NUM_THREADS"] = "1"  # torchrun's default, so N ranks do not oversubscribe the cores
        return env

    def exit_code(self, rank_exit_code: int) -> int:
        """torchrun's exit code when a worker failed: 1 (its ChildFailedError), whatever the worker's."""
        return 1


@dataclass(frozen=True, kw_only=True, slots=True)
class DeepSpeedEnv:
    """What DeepSpeed's per-node launcher tells its workers (deepspeed/launcher/launch.py, `main`)."""

    visible_devices: tuple[tuple[int, ...], ...]
    """Per node, the GPU ids its workers use: their CUDA_VISIBLE_DEVICES (one worker per id)."""
    master_port: int | None = None
    """MASTER_PORT; None: a free port. MASTER_ADDR is always 127.0.0.1."""
    role: ClassVar[str] = "default"

    def variables(self, place: RankPlace) -> dict[str, str]:
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.visible_devices[place.node]),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(place.master_port),
            "WORLD_SIZE": str(place.world_size),
            "CROSS_RANK": str(place.node),
            "CROSS_SIZE": str(place.nnodes),
            "LOCAL_SIZE": str(place.nproc_per_node),
            "RANK": str(place.rank),
            "LOCAL_RANK": str(place.local_rank),
        }

    def exit_code(self, rank_exit_code: int) -> int:
        """DeepSpeed's launcher exits with the failed worker's own code."""
        return process_exit_code(rank_exit_code)


WorkerEnv = TorchrunEnv | DeepSpeedEnv
"""A launcher's worker variables (RANK, WORLD_SIZE, MASTER_PORT, ...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchConfig:
    """One simulated job: the program, the cluster, and how to run and watch its ranks."""

    program: ProgramSpec
    profile: DeviceProfile
    """The simulated GPU's profile, resolved once by the CLI: its sharing and power models run in the
    coordinator, its spec and borrowed parts go into the summary (the ranks resolve `rank_config.gpu` again)."""
    rank_config: RankConfig
    """Settings every rank shares; `rank`, `world_size` and `coordinator` are filled in per rank."""
    cluster: ClusterNetworkConfig
    nnodes: int = 1
    nproc_per_node: int = 1
    workers: WorkerEnv | None = None
    """The launcher whose worker variables every rank gets (torchrun's, DeepSpeed's); None for `phantora
    run`, one process as `python` starts it."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Variables a framework's launcher adds for its workers (Accelerate's ACCELERATE_*, FSDP_*), set over
    the launcher's environment and under the worker variables."""
    output: OutputConfig = OutputConfig(prefix_template=None)
    shutdown_grace_s: float = 30.0
    """After the first failure or a signal: how long ranks get to exit before SIGKILL (torchrun's default)."""
    monitor_interval_s: float = 0.1
    hang_timeout_s: float | None = None
    """Wall-clock seconds a rank may stay silent while a peer has waited as long for it: then it is hung
    (Note [The hang watchdog]). None: the timeout of the process group the waiting rank's last NCCL call used,
    as NCCL's watchdog does (`DEFAULT_HANG_TIMEOUT_S` where the program set none)."""
    progress: bool = False
    """Print a status line on stderr every `progress_interval_s` of wall time."""
    progress_interval_s: float = 5.0
    rank_entry: tuple[str, ...] = DEFAULT_RANK_ENTRY
    """The command a rank process runs, followed by the program's argv (tests use a stand-in rank)."""
    launch_latency_ns: int = 0
    """The coordinator's launch latency; 0 because the host model already charges launches."""
    power_cap: bool = True
    """Slow tensor-core kernels while a GPU's average power exceeds its limit, where the GPU's profile has a
    power model (models/power.py)."""
    chip_variation: bool = True
    """Run every GPU's tensor-core kernels at the pace of the job's expected slowest chip (models/chip_variation.py);
    False: every chip as fast as the mean one."""
    ranks: str = "auto"
    """`--ranks`: "all", a process for every rank; "auto", representative ranks for a job of several nodes
    (protocol/symmetry.py Note [Representative ranks]), every rank within one node."""
    rendezvous: RendezvousSpec | None = None
    """This launcher is one of several, one per node (cli/multinode.py); None: every node runs here."""

    def __post_init__(self) -> None:
        if not self.profile.key == self.rank_config.gpu == self.cluster.gpu:
            raise ValueError(f"the GPU profile ({self.profile.key}), the ranks' GPU ({self.rank_config.gpu}) and the "
                             f"cluster's ({self.cluster.gpu}) differ")
        if self.nnodes < 1 or self.nproc_per_node < 1:
            raise ValueError(f"need at least one node and one process per node, got --nnodes {self.nnodes} "
                             f"--nproc-per-node {self.nproc_per_node}")
        c = self.cluster
        if self.nproc_per_node > c.gpus_per_node:
            raise ValueError(f"--nproc-per-node {self.nproc_per_node} exceeds the cluster's {c.gpus_per_node} "
                             "GPUs per node")
        if self.nnodes > c.nodes:
            raise ValueError(f"--nnodes {self.nnodes} exceeds the cluster's {c.nodes} nodes")
        if self.nnodes > 1 and self.nproc_per_node != c.gpus_per_node:
            # rank r is GPU r of the network model (node r // gpus_per_node): partly used nodes would put
            # ranks on the wrong node
            raise ValueError(f"with several nodes, --nproc-per-node ({self.nproc_per_node}) must equal the "
                             f"cluster's GPUs per node ({c.gpus_per_node})")
        if (self.shutdown_grace_s < 0 or self.monitor_interval_s <= 0 or self.progress_interval_s <= 0
                or (self.hang_timeout_s is not None and self.hang_timeout_s <= 0)):
            raise ValueError("shutdown grace, monitor and progress intervals and the hang timeout must be positive")
        if self.ranks not in RANKS_CHOICES:
            raise ValueError(f"--ranks must be one of {', '.join(RANKS_CHOICES)}, got {self.ranks!r}")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def out_dir(self) -> Path:
        return Path(self.rank_config.out_dir)

    def first_symmetry(self) -> RankSymmetry:
        """Where the launch starts: every rank, or (`--ranks auto`, several nodes) every rank folded onto rank 0,
        refined each time a rank uses a group that folding does not admit."""
        if self.ranks == "all" or self.nnodes == 1 or self.workers is None:
            return RankSymmetry.everyone(self.world_size)
        return RankSymmetry.folded(self.world_size)

    def symmetry_for(self, groups: list[UsedGroup]) -> RankSymmetry:
        """The folding for the groups the ranks reported (protocol/symmetry.py `best_symmetry`)."""
        c = self.cluster
        per_leaf = c.num_gpus if c.fabric.kind == "single_switch" else c.gpus_per_node * c.fabric.nodes_per_leaf
        return best_symmetry(self.world_size, groups, gpus_per_node=c.gpus_per_node, gpus_per_leaf=per_leaf)


RANKS_CHOICES = ("auto", "all")


@dataclass(slots=True, eq=False)
class _Rank:
    rank: int
    local_rank: int
    proc: subprocess.Popen | ForkedRank
    started_s: float = field(default_factory=time.monotonic)
    """time.monotonic() when its process started (the hang watchdog's start-up rule)."""
    exit_code: int | None = None
    exited_at: float = 0.0
    """time.time() when reaped (for the report)."""
    reaped_s: float = 0.0
    """time.monotonic() when reaped (to order against the server's failure)."""
    usage: ProcessUsage | None = None


@dataclass(frozen=True, slots=True)
class _Culprit:
    """The rank at the root of a failure; its exit code is known only after the teardown."""

    rank: _Rank
    note: str = ""


@dataclass(frozen=True, slots=True)
class _Hang:
    """Ranks the hang watchdog found hung (Note [The hang watchdog])."""

    ranks: list[_Rank]
    timeout_s: float
    waited: dict[int, float]
    """The ranks that waited for them, and for how long (wall-clock seconds)."""
    starting: bool = False
    """Hung before they connected to the coordinator."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How supervision ended: success, a root cause (Note [Which failure is the root cause]), or a signal."""

    signal: int | None = None
    root: _Culprit | CoordinatorFault | None = None
    refined: RankSymmetry | None = None
    """A rank used a group the folding does not admit: start again with this folding."""
    cutoff_s: float = 0.0
    """Monotonic time of the first failure: ranks that failed after it were told to stop (or stopped)."""
    error: str | None = None
    """The error line, where the root cause's exit does not say it (a rank the hang watchdog stopped)."""


# --- signals ---------------------------------------------------------------------------------------
class _SignalCatcher:
    """Turns SIGINT/SIGTERM/SIGHUP/SIGQUIT into flags the supervision loop reads (main thread only)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.again = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "_SignalCatcher":
        if threading.current_thread() is threading.main_thread():
            for sig in _HANDLED_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        else:
            self.again = True


# --- the launcher ----------------------------------------------------------------------------------
class _Launcher:
    def __init__(self, config: LaunchConfig, console_out: TextIO, console_err: TextIO,
                 symmetry: RankSymmetry, used_groups: list[UsedGroup], *, forks: ForkServer | None = None,
                 job_id: str | None = None) -> None:
        self.config = config
        self.world_size = config.world_size
        self.symmetry = symmetry
        self.used_groups = used_groups
        """The groups ranks reported so far, in this run and the ones it started again from."""
        self.processes = symmetry.processes
        sharing = config.profile.sharing.value  # how compute and NCCL kernels slow each other (models/interference.py)
        network = NetworkSimulator(Topology(config.cluster), sharing=sharing,
                                   compute_of=symmetry.representative if symmetry.mirrored else None)
        power = config.profile.power.value if config.power_cap else None
        chips = config.profile.chip_variation.value if config.chip_variation else UNIFORM_CHIPS
        self.coordinator = Coordinator(self.world_size, network, launch_latency_ns=config.launch_latency_ns,
                                       sharing=sharing, power=power, symmetry=symmetry,
                                       clock_factor=chips.slowest_of(self.world_size))
        self.server = self._new_server()
        role = config.workers.role if config.workers else "default"
        self.pump = OutputPump(config.output, console_out=console_out, console_err=console_err, role=role)
        self.ranks: list[_Rank] = []
        self.exit_order: list[_Rank] = []
        self.signals = _SignalCatcher()
        self.master_port = (config.workers.master_port or _free_port()) if config.workers else 0
        self._store = None
        """With mirrors, the launcher hosts the c10d store, as torchrun's agent does: rank 0's would wait for
        every rank of the world to connect."""
        self._owns_forks = forks is None
        self.forks = _fork_server() if forks is None else forks
        """Where rank processes are forked from (cli/fork_server.py); shared by the runs of one launch."""
        self.job_id = job_id or new_job_id()
        """Marks every process of the job (cli/processes.py Note [When the launcher itself is killed])."""
        self.guardian: Guardian | None = None
        self.refined: RankSymmetry | None = None
        """Set when the run stopped to start again with a finer folding (`_refined_symmetry`)."""
        self._grace_deadline: float | None = None
        self._next_progress = 0.0
        self._progress_records = 0
        self._progress_at = 0.0

    def _new_server(self) -> CoordinatorServer:
        return CoordinatorServer(self.coordinator, self.processes)

    def run(self) -> int:
        cfg = self.config
        refuse_what_cannot_fit(len(self._spawned_ranks()), available_host_bytes())
        try:
            _clear_stale_outputs(cfg.out_dir, self.symmetry.representatives)
        except OSError as error:
            raise LaunchError(f"cannot use the output folder {cfg.out_dir}: {error.strerror or error}") from None
        _raise_open_file_limit(3 * self.processes + 64)  # a socket and two pipes per rank
        started = time.monotonic()
        since_ticks = own_start_ticks()
        was_subreaper = set_child_subreaper(True)  # Note [No process outlives its simulation]
        with self.signals, self._guardian():
            self.server.start()
            try:
                self._spawn_all()
                outcome = self._supervise()
                if outcome.refined is not None:  # nothing of this run is kept
                    self._stop_ranks(signal.SIGKILL)
            except BaseException:
                self._stop_ranks(signal.SIGKILL)
                raise
            finally:
                self._stop_everything(since_ticks, was_subreaper)
                self.pump.drain(_DRAIN_TIMEOUT_S)
                self.server.close()
                self._store = None
        if outcome.refined is not None:
            self.refined = outcome.refined
            self.pump.close()
            return 0
        wall_s = time.monotonic() - started
        return self._finish(outcome, wall_s)

    def _guardian(self) -> Guardian:
        """The process that ends the job should this launcher be killed (Note [When the launcher itself is killed]
        in cli/processes.py)."""
        self.guardian = Guardian(self.job_id)
        return self.guardian

    def _stop_everything(self, since_ticks: int, was_subreaper: bool | None) -> None:
        """Stop the ranks still running (with the signal the launcher got, else SIGTERM), end what they left,
        give the subreaper setting back."""
        if any(r.exit_code is None for r in self.ranks):
            self._stop_ranks(signal.SIGTERM if self.signals.received is None else self.signals.received)
        self._end_leftovers(since_ticks)  # before draining: a leftover may hold a rank's pipes open
        if self._owns_forks:
            self.forks.close()
        if was_subreaper is not None:
            set_child_subreaper(was_subreaper)

    # --- spawning ---------------------------------------------------------------------------------
    def _spawn_all(self) -> None:
        cfg = self.config
        if self.symmetry.mirrored and cfg.workers is not None:
            from torch.distributed import TCPStore  # only here: the launcher otherwise needs no torch

            self._store = TCPStore("127.0.0.1", self.master_port, is_master=True, wait_for_workers=False)
        for rank in self._spawned_ranks():
            local_rank = rank % cfg.nproc_per_node
            argv = [*cfg.rank_entry, *cfg.program.argv(local_rank)]
            env = {**self._rank_env(rank, local_rank), JOB_ENV_VAR: self.job_id,
                   LAUNCHER_PID_ENV_VAR: str(os.getpid())}
            try:
                proc = self._start_rank(argv, env)
            except OSError as error:
                raise LaunchError(f"cannot start rank {rank} ({argv[0]}): {error}") from None
            except ForkServerError as error:
                raise LaunchError(f"cannot start rank {rank}: {error}") from None
            self.ranks.append(_Rank(rank, local_rank, proc))
            self.pump.attach(rank, local_rank, proc)

    def _start_rank(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen | ForkedRank:
        """The rank's process: forked from the fork server where it runs the runtime's bootstrap and shares the
        fork server's start-up environment, else started by exec (cli/fork_server.py)."""
        stdin, streams = self._rank_stdin(), self.pump.popen_streams()
        entry = self.config.rank_entry
        if not self.forks.enabled or entry != DEFAULT_RANK_ENTRY or not self.forks.can_fork(env):
            return subprocess.Popen(argv, env=env, process_group=0, stdin=stdin, **streams)
        return self._fork_rank(argv[len(entry):], env, stdin, [streams["stdout"], streams["stderr"]])

    def _fork_rank(self, program: list[str], env: dict[str, str], stdin: int | None,
                   outputs: list[int | None]) -> ForkedRank:
        """Fork the rank with the descriptors Popen would give it: /dev/null or the launcher's stdin, a pipe per
        captured output, else the launcher's own."""
        pipes = [os.pipe() if output == subprocess.PIPE else None for output in outputs]
        null = os.open(os.devnull, os.O_RDONLY) if stdin == subprocess.DEVNULL else None
        try:
            pid = self.forks.spawn(program, env, stdin=0 if null is None else null,
                                   stdout=pipes[0][1] if pipes[0] else 1, stderr=pipes[1][1] if pipes[1] else 2)
        except BaseException:
            for pipe in pipes:
                if pipe:
                    os.close(pipe[0])
            raise
        finally:
            for fd in [null, *(pipe[1] for pipe in pipes if pipe)]:
                if fd is not None:
                    os.close(fd)
        out, err = (open(pipe[0], "rb", buffering=0) if pipe else None for pipe in pipes)
        return ForkedRank(pid, out, err)

    def _spawned_ranks(self) -> Sequence[int]:
        """The rank processes this launcher starts: every one that runs, unless other launchers start some
        (cli/multinode.py)."""
        return self.symmetry.representatives

    def _rank_stdin(self) -> int | None:
        """The launcher's stdin for `phantora run` when it is a file or pipe; else nothing. A rank runs in its
        own process group (so signals reach it only through the launcher), where reading a terminal
        would stop it (SIGTTIN); under torchrun, ranks never shared one stdin."""
        if self.config.output.captures or sys.stdin is None or sys.stdin.isatty():
            return subprocess.DEVNULL
        return None

    def _rank_env(self, rank: int, local_rank: int) -> dict[str, str]:
        rank_config = replace(self.config.rank_config, rank=rank, world_size=self.world_size,
                              coordinator=self.server.address, folded_axes=self.symmetry.to_json())
        env = rank_environment(self.config, rank, local_rank, rank_config=rank_config, token=self.server.token,
                               master_port=self.master_port)
        if self.symmetry.mirrored:
            env["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # the launcher's store (`_spawn_all`)
        return env

    # --- supervision ------------------------------------------------------------------------------
    def _supervise(self) -> _Outcome:
        cfg = self.config
        self._progress_at = time.monotonic()
        self._next_progress = self._progress_at + cfg.progress_interval_s
        while True:
            self.pump.poll(cfg.monitor_interval_s)
            self._reap()
            if self.signals.received is not None:
                return _Outcome(signal=self.signals.received)
            if self.pump.output_closed:  # as a program writing to a closed pipe gets SIGPIPE
                return _Outcome(signal=signal.SIGPIPE)
            refined = self._refined_symmetry()
            if refined is not None:
                return _Outcome(refined=refined)
            root = self._detect_fault()
            if root is not None:
                failure = self.server.failure
                return _Outcome(root=root, cutoff_s=failure.at_s if failure else time.monotonic())
            hang = self._detect_hang()
            if hang is not None:
                return self._stop_hung(hang)
            if all(r.exit_code is not None for r in self.ranks) and self.server.stopped:
                if self.server.finished:
                    return _Outcome()
                return _Outcome(root=CoordinatorFault("the coordinator stopped before every rank finished",
                                                      time.time()))
            if cfg.progress:
                self._maybe_progress()

    def _refined_symmetry(self) -> RankSymmetry | None:
        """Once a rank stopped for a group the folding does not admit (Note [Representative ranks] in
        protocol/symmetry.py): the folding that admits every group reported so far."""
        reported = False
        for r in self.exit_order:
            if r.exit_code != BROKEN_SYMMETRY_EXIT_CODE:
                continue
            try:
                groups = json.loads((self.config.out_dir / f"rank{r.rank}" / BROKEN_SYMMETRY_FILE).read_text())
            except (OSError, ValueError):
                continue  # exited with that code without the file: a failure like any other
            for g in groups:
                used = UsedGroup(tuple(g["ranks"]), g["whole"])
                if used not in self.used_groups:
                    self.used_groups.append(used)
            reported = True
        if not reported:
            return None
        refined = self.config.symmetry_for(self.used_groups)
        if refined == self.symmetry:  # cannot be (it does not admit a reported group), but never loop
            refined = RankSymmetry.everyone(self.world_size)
        _write_folding(self.config.out_dir, refined, self.used_groups)
        broken = next((g for g in self.used_groups if not self.symmetry.admits(g.ranks, whole=g.whole)),
                      self.used_groups[-1])
        self.pump.say(f"phantora: the program uses the group {_ranks_text(list(broken.ranks))}"
                      f"{' (a transfer or a gloo group: every member runs)' if broken.whole else ''}, which "
                      f"{self.processes} representative rank(s) cannot stand for; starting again with "
                      f"{refined.processes} of {self.world_size}")
        return refined

    def _reap(self) -> None:
        for r in self.ranks:
            if r.exit_code is None and _reap(r):
                self.exit_order.append(r)
                self.server.rank_exited(r.rank)

    def _detect_fault(self) -> _Culprit | CoordinatorFault | None:
        """The root cause, once there is a failure to stop for (Note [Which failure is the root cause])."""
        failure = self.server.failure  # read after reaping: see the Note
        if failure is None:
            failed = next((r for r in self.exit_order if r.exit_code != 0), None)
            if failed is None:
                return None
            if (failed.rank in self.server.finished_ranks() and any(r.exit_code is None for r in self.ranks)
                    and not self._grace_over()):
                return None  # the coordinator may yet find the deadlock its exit leaves (see the Note)
            return _Culprit(failed)
        if failure.kind == "deadlock":
            return self._deadlock_cause(failure)
        culprit = next((r for r in self.ranks if r.rank == failure.rank), None)
        if failure.kind != "disconnect" or culprit is None:  # None: no rank, or one another launcher started
            return _coordinator_fault(failure)
        if culprit.exit_code is None and not self._grace_over():
            return None
        return _Culprit(culprit, note=failure.message)

    def _deadlock_cause(self, failure: ServerFailure) -> _Culprit | CoordinatorFault | None:
        """A rank that reported the end of its program and then exits non-zero (it failed after the runtime
        said it was done) left its peers waiting: it is the cause, not the deadlock it produced."""
        finished = self.server.finished_ranks()
        failed = next((r for r in self.exit_order if r.rank in finished and r.exit_code != 0), None)
        if failed is not None:
            return _Culprit(failed, note="its peers were left waiting for it (the coordinator found a deadlock)")
        if any(r.exit_code is None for r in self.ranks if r.rank in finished) and not self._grace_over():
            return None
        return _coordinator_fault(failure)

    def _detect_hang(self) -> _Hang | None:
        """Ranks hung while a peer waits for them, or hung before they connected (Note [The hang watchdog])."""
        now = time.monotonic()
        activity, status = self.server.activity(), self.server.rank_status()
        running = [r for r in self.ranks if r.exit_code is None]
        expired = {rank: now - a.waiting_since_s for rank, a in activity.items() if a.waiting_since_s is not None
                   and now - a.waiting_since_s >= self._hang_timeout(status.get(rank))}
        if expired:
            timeout = min(self._hang_timeout(status.get(rank)) for rank in expired)
            finished = self.server.finished_ranks()
            busy = [r for r in running if r.rank not in finished
                    and (r.rank not in activity or activity[r.rank].waiting_since_s is None)]
            if busy and all(r.rank in activity and now - activity[r.rank].heard_s >= timeout for r in busy):
                waited = {rank: now - a.waiting_since_s for rank, a in activity.items()
                          if a.waiting_since_s is not None}
                return _Hang(busy, timeout, waited)
        return self._hung_starting(running, status, now)

    def _hung_starting(self, running: list[_Rank], status: dict[int, RankStatus], now: float) -> _Hang | None:
        """Ranks that have not connected within the timeout while every other rank has (Note [The hang watchdog])."""
        connected = self.server.connected_at()
        starting = [r for r in running if r.rank not in connected]
        if not starting or len(starting) == len(running):
            return None  # nothing starting, or nobody connected yet: ranks may just be slow to import
        timeout = self._hang_timeout(max(status.values(), key=lambda s: s.timeout_s, default=None))
        since = max(max(r.started_s for r in starting), max(connected.values()))
        return _Hang(starting, timeout, {}, starting=True) if now - since >= timeout else None

    def _hang_timeout(self, status: RankStatus | None) -> float:
        """`--hang-timeout`, else the timeout of the group of the rank's last NCCL call (else NCCL's default)."""
        if self.config.hang_timeout_s is not None:
            return self.config.hang_timeout_s
        return status.timeout_s if status is not None and status.timeout_s > 0 else DEFAULT_HANG_TIMEOUT_S

    def _stop_hung(self, hang: _Hang) -> _Outcome:
        """Abort the hung ranks so Python's faulthandler prints where each one is (PYTHONFAULTHANDLER is set
        in every rank), and wait for them to exit so their stacks are in the report."""
        for r in hang.ranks:
            _signal_process(r.proc, signal.SIGABRT)
        deadline = time.monotonic() + _EXIT_GRACE_S
        while any(r.exit_code is None for r in hang.ranks) and time.monotonic() < deadline:
            self.pump.poll(0.05)
            self._reap()
        names = ", ".join(str(r.rank) for r in hang.ranks)
        if hang.starting:
            error = (f"rank {names} did not connect to the coordinator within {hang.timeout_s:g} s (wall clock) "
                     "while every other rank did: hung in its start-up (its Python stack is in the report)")
            note = (f"hung before it connected: still starting {hang.timeout_s:g} s after its process and its last "
                    "peer's connection started; the watchdog aborted it, its Python stack (faulthandler) follows")
            return _Outcome(root=_Culprit(hang.ranks[0], note=note), cutoff_s=time.monotonic(), error=error)
        waiting = ", ".join(map(str, sorted(hang.waited)))
        error = (f"rank {names} made no progress for {hang.timeout_s:g} s (wall clock) while rank {waiting} "
                 "waited for it: hung (its Python stack is in the report)")
        watchdog = self._watchdog_lines(hang.waited)
        note = "\n".join([*watchdog, f"hung: nothing from it for {hang.timeout_s:g} s of wall-clock time while "
                          f"rank(s) {waiting} waited at a synchronization; the watchdog aborted it, its Python "
                          "stack (faulthandler) follows"])
        return _Outcome(root=_Culprit(hang.ranks[0], note=note), cutoff_s=time.monotonic(), error=error)

    def _watchdog_lines(self, waited: dict[int, float]) -> list[str]:
        """What NCCL's watchdog says on each waiting rank whose last NCCL call is known, also on its stderr."""
        status, lines = self.server.rank_status(), []
        for rank, waited_s in sorted(waited.items()):
            s = status.get(rank)
            if s is None or not s.work or waited_s < self._hang_timeout(s):
                continue
            line = (f"[Rank {s.group_rank}] Watchdog caught collective operation timeout: {s.work} ran for "
                    f"{int(waited_s * 1000)} milliseconds before timing out.")
            self.pump.say(f"[rank{rank}]:{line}")
            lines.append(f"rank {rank}: {line}")
        return lines

    def _grace_over(self) -> bool:
        """Whether the processes involved in a server failure have had their time to exit."""
        if self._grace_deadline is None:
            self._grace_deadline = time.monotonic() + _EXIT_GRACE_S
        return time.monotonic() >= self._grace_deadline

    def _stop_ranks(self, sig: int) -> None:
        """Send `sig` to every rank still running, give them the grace period, then SIGKILL."""
        running = [r for r in self.ranks if r.exit_code is None]
        if not running:
            return
        if sig != signal.SIGKILL and self.config.output.captures:
            self.pump.say(f"phantora: stopping {len(running)} rank process(es) with {signal.Signals(sig).name}")
        for r in running:
            _signal_group(r.proc, sig)
        deadline = time.monotonic() + (0 if sig == signal.SIGKILL else self.config.shutdown_grace_s)
        while any(r.exit_code is None for r in running):
            if time.monotonic() >= deadline or self.signals.again:
                for r in running:
                    if r.exit_code is None:
                        _signal_group(r.proc, signal.SIGKILL)
                deadline = float("inf")
            self.pump.poll(0.05)
            self._reap()

    def _end_leftovers(self, since_ticks: int) -> None:
        """End what the ranks started and left running (Note [No process outlives its simulation])."""
        ended = end_leftovers([r.proc.pid for r in self.ranks], since_ticks, spare=self._helpers())
        if ended:
            self.pump.say(f"phantora: ended {len(ended)} process(es) the ranks left running (pids "
                          f"{', '.join(map(str, ended[:10]))}{', ...' if len(ended) > 10 else ''})")

    def _helpers(self) -> list[int]:
        """The launcher's own child processes, which are not the simulation's leftovers."""
        helpers = [self.guardian.proc.pid] if self.guardian is not None else []
        return helpers + ([self.forks.pid] if self.forks.pid is not None else [])

    def _maybe_progress(self) -> None:
        now = time.monotonic()
        if now < self._next_progress:
            return
        p = self.server.progress()
        rate = (p.records - self._progress_records) / max(now - self._progress_at, 1e-9)
        self._progress_records, self._progress_at = p.records, now
        self._next_progress = now + self.config.progress_interval_s
        alive = sum(r.exit_code is None for r in self.ranks)
        self.pump.say(f"phantora: simulated {p.safe_ns / 1e9:.6f} s (safe time) | {rate / 1e3:.0f}k records/s | "
                      f"{p.connected}/{self.processes} ranks connected, {p.finished} finished, {alive} running")

    # --- the end ----------------------------------------------------------------------------------
    def _finish(self, outcome: _Outcome, wall_s: float) -> int:
        cfg = self.config
        root = self._resolve(outcome.root)
        exit_code = self._exit_code(outcome, root)
        error = None if exit_code == 0 else self._error_line(outcome, root)
        own = resource.getrusage(resource.RUSAGE_SELF)
        self._write_known_peaks()
        summary = build_summary(
            coordinator=self.coordinator, gpu=cfg.profile.spec, cluster=cfg.cluster, borrowed=cfg.profile.borrowed(),
            world_size=self.world_size, representatives=self.symmetry.representatives, out_dir=cfg.out_dir,
            exit_code=exit_code,
            complete=self.server.finished and exit_code == 0,
            wall_s=wall_s, processes=self._process_usage(),
            launcher_peak_rss_bytes=_peak_rss_bytes(own.ru_maxrss), launcher_cpu_s=own.ru_utime + own.ru_stime,
            records=self.server.progress().records, error=error,
            host_time=cfg.rank_config.host_time, host_time_scale=cfg.rank_config.host_time_scale,
            host_contention=cfg.rank_config.host_contention)
        write_reports(summary, self.coordinator, cfg.out_dir, trace=cfg.rank_config.trace)
        merge_rank_ops(cfg.out_dir, self.symmetry.representatives, gpu=cfg.rank_config.gpu)  # <out>/ops.jsonl for `phantora profile`
        print_summary(summary, file=self.pump.console_err)
        if root is not None and cfg.workers is not None:
            others = self._other_failures(root, outcome.cutoff_s)
            self.pump.say(format_failure_report(cfg.program.name, root, others))
        elif isinstance(root, CoordinatorFault):
            self.pump.say(f"phantora: {root.message.removeprefix('phantora: ')}")
        if error is not None:
            self.pump.say(f"phantora: error: {error}; partial results are in {cfg.out_dir}/")
        self.pump.close()
        return exit_code

    def _write_known_peaks(self) -> None:
        """A rank that died without its result file (killed by a signal) still has its peak memory in the reports:
        what it last told the server (`RankStatus`), written as its result file, marked as such."""
        status, exits = self.server.rank_status(), {r.rank: r.exit_code for r in self.ranks}
        for rank in self.symmetry.representatives:
            path = self.config.out_dir / f"rank{rank}" / "result.json"
            known = status.get(rank)
            if known is None or not known.peaks or path.exists():
                continue
            devices = [{"index": i, "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved}
                       for i, (allocated, reserved) in enumerate(known.peaks)]
            path.write_text(json.dumps({"rank": rank, "exit_code": exits.get(rank), "devices": devices,
                                        "written_by": "the launcher: the rank ended without writing it; its peak "
                                                      "memory as of its last batch to the coordinator"}, indent=1))

    def _process_usage(self) -> list[ProcessUsage]:
        return [r.usage for r in self.ranks if r.usage is not None]

    def _resolve(self, root: _Culprit | CoordinatorFault | None) -> RankExit | CoordinatorFault | None:
        return self._rank_exit(root.rank, note=root.note) if isinstance(root, _Culprit) else root

    def _rank_exit(self, r: _Rank, note: str = "") -> RankExit:
        return RankExit(rank=r.rank, local_rank=r.local_rank, pid=r.proc.pid,
                        exit_code=r.exit_code if r.exit_code is not None else 0, wall_time=r.exited_at,
                        error_file=str(self.config.out_dir / f"rank{r.rank}" / "error.json"),
                        stderr_tail=tuple(self.pump.stderr_tail(r.rank)), note=note)

    def _other_failures(self, root: RankExit | CoordinatorFault, cutoff_s: float) -> list[RankExit]:
        """Ranks that had failed on their own before the first failure (later ones were told to stop)."""
        root_rank = root.rank if isinstance(root, RankExit) else None
        return [self._rank_exit(r) for r in self.exit_order
                if r.rank != root_rank and r.exit_code != 0 and r.reaped_s < cutoff_s]

    def _exit_code(self, outcome: _Outcome, root: RankExit | CoordinatorFault | None) -> int:
        if outcome.signal is not None:
            return 128 + outcome.signal
        if root is None:
            return 0
        if isinstance(root, RankExit) and root.exit_code != 0:
            # `phantora run` exits like the program did; a launcher as that launcher does
            workers = self.config.workers
            return workers.exit_code(root.exit_code) if workers else process_exit_code(root.exit_code)
        return 1  # the simulation failed (torchrun's ChildFailedError)

    def _error_line(self, outcome: _Outcome, root: RankExit | CoordinatorFault | None) -> str:
        if outcome.error is not None:
            return outcome.error
        if outcome.signal == signal.SIGPIPE:
            return "the output's reader went away (SIGPIPE)"
        if outcome.signal is not None:
            return f"interrupted ({signal.Signals(outcome.signal).name})"
        if isinstance(root, RankExit):
            who = "the program" if self.config.workers is None else f"rank {root.rank}"
            if root.exit_code < 0:
                return f"{who} was killed by signal {-root.exit_code} ({signal.Signals(-root.exit_code).name})"
            if root.exit_code == 0:
                return f"{who} stopped before it finished: {root.note.removeprefix('phantora: ')}"
            return f"{who} exited with code {root.exit_code}"
        lines = root.message.strip().splitlines() if root is not None else []
        first = lines[0].removeprefix("phantora: ").rstrip(":") if lines else "unknown reason"
        return f"the simulation stopped: {first}"


# --- a rank's environment --------------------------------------------------------------------------
def rank_environment(config: LaunchConfig, rank: int, local_rank: int, *, rank_config: RankConfig, token: str,
                     master_port: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Everything a rank process's environment holds: the launcher's (`base`, default os.environ), then the
    framework launcher's additions (`extra_env`), Phantora's own variables, then the worker variables of
    the launcher being reproduced (`config.workers`), which win as they do in that launcher."""
    env = {**(os.environ if base is None else base), **config.extra_env}
    env.setdefault("PYTHONUNBUFFERED", "1")  # torchrun and DeepSpeed run `python -u`: lines arrive as printed
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a rank the hang watchdog aborts prints its Python stack
    env[CONFIG_ENV_VAR] = rank_config.to_env()
    env[TOKEN_ENV_VAR] = token
    if config.workers is not None:
        place = RankPlace(rank=rank, local_rank=local_rank, nnodes=config.nnodes,
                          nproc_per_node=config.nproc_per_node, master_port=master_port, out_dir=config.out_dir,
                          inherited=env)
        env.update(config.workers.variables(place))
    return env


# --- helpers ---------------------------------------------------------------------------------------
def _coordinator_fault(failure: ServerFailure) -> CoordinatorFault:
    return CoordinatorFault(failure.message, time.time() - (time.monotonic() - failure.at_s))


def _fork_server() -> ForkServer:
    try:
        return ForkServer(fork_server_enabled(os.environ))
    except ForkServerError as error:
        raise LaunchError(str(error)) from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RANK_HOST_BYTES = 250 * 2**20
"""The least host memory a started rank holds of its own: its private memory once torch is imported and the runtime
installed, with a small model's step (8.03 GB over 32 ranks, `peak_footprint_bytes` in data/simulator/scale)."""


def refuse_what_cannot_fit(processes: int, available: int | None) -> None:
    """Refuse, before any rank starts, a job whose rank processes would not fit in the host's available memory
    (`available` bytes; None: unknown), rather than let the OS kill them one by one."""
    needed = processes * RANK_HOST_BYTES
    if available is not None and needed > available:
        raise LaunchError(
            f"{processes} rank processes need at least {needed / 2**30:.1f} GiB of host memory "
            f"({RANK_HOST_BYTES / 2**30:.2f} GiB each) and this machine has {available / 2**30:.1f} GiB available: "
            "simulate fewer processes (a job of several nodes runs representative ranks: --ranks auto) "
            "or use a larger machine")


def available_host_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The kernel's estimate of memory available to new processes (MemAvailable); None where it is not known."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _raise_open_file_limit(needed: int) -> None:
    """Large jobs need more descriptors than the usual soft limit of 1024; raise it up to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _peak_rss_bytes(ru_maxrss: int) -> int:
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024  # Linux reports KiB


def _reap(r: _Rank) -> bool:
    """Collect the rank's exit status and resource usage if it has ended (wait4: Popen keeps no rusage)."""
    pid, status, usage = os.wait4(r.proc.pid, os.WNOHANG)
    if pid == 0:
        return False
    r.exit_code = os.waitstatus_to_exitcode(status)
    r.proc.returncode = r.exit_code  # tell Popen, so it never waits for a pid that is gone
    r.exited_at = time.time()
    r.reaped_s = time.monotonic()
    r.usage = ProcessUsage(rank=r.rank, peak_rss_bytes=_peak_rss_bytes(usage.ru_maxrss),
                           cpu_s=usage.ru_utime + usage.ru_stime)
    return True


def _signal_process(proc: subprocess.Popen, sig: int) -> None:
    """Signal the rank process alone (not the children in its group)."""
    try:
        os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the rank's process group: the rank and anything it started (DataLoader workers)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _clear_stale_outputs(out_dir: Path, ranks: Sequence[int]) -> None:
    """Remove what an earlier run left in the output folder, so it never mixes into this run's reports; make
    each rank's folder, where torch's @record writes a failing program's traceback (TORCHELASTIC_ERROR_FILE)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (out_dir / f"rank{rank}").mkdir(exist_ok=True)
    for name in ("summary.json", "trace.json", "report.png", "timeline.png", OPS_FILE):
        (out_dir / name).unlink(missing_ok=True)
    for rank_dir in out_dir.glob("rank*"):
        if rank_dir.is_dir() and rank_dir.name[4:].isdigit():
            for name in ("result.json", "memory.json", "error.json", "trace.json", OPS_FILE, BROKEN_SYMMETRY_FILE):
                (rank_dir / name).unlink(missing_ok=True)


FOLDING_FILE = "folding.json"
"""`<out>/folding.json`: the folding of representative ranks a run started again with, and the groups that chose it."""


def _write_folding(out_dir: Path, symmetry: RankSymmetry, groups: list[UsedGroup]) -> None:
    record = {"world_size": symmetry.world_size, "folded_axes": symmetry.to_json(), "processes": symmetry.processes,
              "groups": [{"ranks": list(g.ranks), "whole": g.whole} for g in groups]}
    (out_dir / FOLDING_FILE).write_text(json.dumps(record, indent=1))


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}..{ranks[-1]}"
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


def launch(config: LaunchConfig, *, console_out: TextIO | None = None, console_err: TextIO | None = None) -> int:
    """Simulate the job; returns the exit code (0, 1 like torchrun's ChildFailedError, the program's
    own code for `phantora run`, 128+N on signal N). Reports are written in every case. With representative
    ranks, a run that finds a group its period does not admit starts again at a refined period."""
    if config.rendezvous is not None:  # one launcher of several
        from phantora.cli.multinode import launch_node
        return launch_node(config, console_out=console_out, console_err=console_err)
    symmetry, used_groups = config.first_symmetry(), []
    (config.out_dir / FOLDING_FILE).unlink(missing_ok=True)  # an earlier run's
    forks, job_id = _fork_server(), new_job_id()  # one for every run of the launch
    try:
        while True:
            launcher = _Launcher(config, console_out or sys.stdout, console_err or sys.stderr, symmetry, used_groups,
                                 forks=forks, job_id=job_id)
            code = launcher.run()
            if launcher.refined is None:
                return code
            symmetry = launcher.refined
    finally:
        forks.close()
