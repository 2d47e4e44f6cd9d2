"""`phantora torchrun`: the arguments torchrun takes, with torchrun's meaning, turned into a LaunchConfig.

The option list, spellings (`--nproc-per-node` and `--nproc_per_node`), defaults and `PET_*`
environment defaults follow torch/distributed/run.py (`get_args_parser`, torch 2.13). A job of several
nodes runs here whole, or, given where its launchers meet or which node this is (`--rdzv-endpoint`,
`--node-rank K`, a `--master-addr` of another machine), as one launcher per machine (`rendezvous_spec`, cli/multinode.py).
What differs from torchrun:
- with every node here, `--local-addr` is not used (MASTER_ADDR is 127.0.0.1; rank 0's
  init_process_group hosts the store, as with torchrun's static rendezvous);
- `--nnodes` is a number (or N:N), not an elastic range; `--nproc-per-node gpu`/`auto` is the
  cluster's GPUs per node; `--max-restarts` is accepted but a failed simulation is not restarted
  (it would fail the same way);
- `--no-python` needs a Python interpreter as the program (`--no-python python3 train.py`):
  Phantora can only simulate Python programs.
Options that only tune torchrun's own machinery (start method, monitor and event-log handlers, NUMA
binding, log specs, duplicate filters, signals to handle) are accepted and have no effect, except
`--shutdown-timeout` (grace before SIGKILL) and `--monitor-interval` (how often ranks are checked).
"""

from __future__ import annotations

import argparse
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from phantora.cli.launch import LaunchConfig, ProgramSpec, TorchrunEnv
from phantora.cli.multinode import DEFAULT_JOIN_TIMEOUT_S, RendezvousSpec
from phantora.cli.output import DEFAULT_PREFIX_TEMPLATE, OutputConfig, parse_std

_LOCAL_ADDRESSES = ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0")
_DEFAULT_RDZV_PORT = 29400
"""torch's default port for a rendezvous endpoint without one (torch/distributed/elastic/rendezvous/utils.py)."""
_DEFAULT_MASTER_PORT = 29500
"""torchrun's --master-port default: the static rendezvous's port when none is given."""
SECRET_ENV_VAR = "PHANTORA_SECRET"
"""The secret shared by the launchers of a job on several machines, when --secret-file is not given."""
_MIN_SECRET_CHARS = 16
_DEFAULT_SHUTDOWN_TIMEOUT_S = 30


class TorchrunArgumentError(ValueError):
    """A torchrun argument Phantora cannot honour (one line)."""


def _env_value(variable: str, raw: str, parse: Callable[[str], Any] | None) -> Any:
    try:
        return parse(raw) if parse else raw
    except (TypeError, ValueError):
        raise TorchrunArgumentError(f"environment variable {variable}={raw!r} is not a valid value") from None


def _option(parser: argparse.ArgumentParser, *flags: str, switch: bool = False, **kwargs: Any) -> None:
    """Add a torchrun option; like torchrun's `env`/`check_env` actions, `PET_<DEST>` sets its default."""
    action = parser.add_argument(*flags, action="store_true" if switch else "store", **kwargs)
    variable = f"PET_{action.dest.upper()}"
    raw = os.environ.get(variable)
    if raw is not None:
        if switch:
            action.default = raw.strip() not in ("", "0")
        else:
            action.default = _env_value(variable, raw, kwargs.get("type"))


def add_torchrun_arguments(parser: argparse.ArgumentParser) -> None:
    """torchrun's options (torch/distributed/run.py), then the script and its arguments."""
    t = parser.add_argument_group("torchrun options (as torchrun)")
    _option(t, "--nnodes", type=str, default="1:1", help="number of nodes: N or N:N")
    _option(t, "--nproc-per-node", "--nproc_per_node", type=str, default="1",
            help="processes (simulated GPUs) per node: a number, or gpu/auto = the cluster's GPUs per node")
    _option(t, "--rdzv-backend", "--rdzv_backend", type=str, default="static", help="accepted; not used")
    _option(t, "--rdzv-endpoint", "--rdzv_endpoint", type=str, default="",
            help="HOST[:PORT] where the launchers of a job on several machines meet (node 0's machine)")
    _option(t, "--rdzv-id", "--rdzv_id", type=str, default="none", help="the job id (TORCHELASTIC_RUN_ID)")
    _option(t, "--rdzv-conf", "--rdzv_conf", type=str, default="", help="accepted; not used")
    _option(t, "--standalone", switch=True, help="single-node rendezvous (a fresh run id)")
    _option(t, "--max-restarts", "--max_restarts", type=int, default=0,
            help="accepted; a failed simulation is not restarted")
    _option(t, "--monitor-interval", "--monitor_interval", type=float, default=0.1,
            help="seconds between checks of the rank processes")
    _option(t, "--start-method", "--start_method", type=str, default="spawn", choices=["spawn", "fork", "forkserver"],
            help="accepted; ranks are always new processes")
    _option(t, "--event-log-handler", "--event_log_handler", type=str, default="null", help="accepted; not used")
    _option(t, "--role", type=str, default="default", help="worker role (ROLE_NAME)")
    _option(t, "-m", "--module", switch=True, help="run the script argument as a module, like python -m")
    _option(t, "--no-python", "--no_python", switch=True,
            help="the script argument is the program itself; it must be a Python interpreter")
    _option(t, "--run-path", "--run_path", switch=True, help="run the script with runpy.run_path")
    _option(t, "--log-dir", "--log_dir", type=str, default=None,
            help="folder for --redirects/--tee log files (default: OUT/logs)")
    _option(t, "-r", "--redirects", type=str, default="0",
            help="send std streams to log files only: 0-3 or a local-rank map like 0:3,1:0")
    _option(t, "-t", "--tee", type=str, default="0", help="send std streams to log files and the console")
    _option(t, "--log-line-prefix-template", "--log_line_prefix_template", type=str, default=None,
            help="prefix of each console line: ${role_name}, ${local_rank}, ${rank} and ${hostname} are replaced "
                 "(default: $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else '[rank${rank}]:')")
    _option(t, "--local-ranks-filter", "--local_ranks_filter", type=str, default="",
            help="only show these local ranks on the console, e.g. 0,1")
    _option(t, "--duplicate-stdout-filters", "--duplicate_stdout_filters", type=str, default="",
            help="accepted; not used")
    _option(t, "--duplicate-stderr-filters", "--duplicate_stderr_filters", type=str, default="",
            help="accepted; not used")
    _option(t, "--node-rank", "--node_rank", type=int, default=None,
            help="this machine's node, with one launcher per machine (static rendezvous; torchrun's default 0)")
    _option(t, "--master-addr", "--master_addr", type=str, default="127.0.0.1",
            help="node 0's machine, with one launcher per machine (static rendezvous)")
    _option(t, "--master-port", "--master_port", type=int, default=None,
            help="MASTER_PORT for rank 0's store (default: a free port); with one launcher per machine and no "
                 "--rdzv-endpoint, the rendezvous port on node 0 (default 29500)")
    _option(t, "--local-addr", "--local_addr", type=str, default=None, help="accepted; not used")
    _option(t, "--logs-specs", "--logs_specs", type=str, default=None, help="accepted; not used")
    _option(t, "--numa-binding", "--numa_binding", type=str, default=None, help="accepted; not used")
    _option(t, "--signals-to-handle", "--signals_to_handle", type=str, default="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
            help="accepted; SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the job")
    _option(t, "--shutdown-timeout", "--shutdown_timeout", type=int, default=None,
            help="seconds ranks get to exit after a failure or signal before SIGKILL (default 30)")
    _option(t, "--virtual-local-rank", "--virtual_local_rank", switch=True,
            help="LOCAL_RANK=0 for every rank, each seeing one GPU")
    m = parser.add_argument_group("several machines (Phantora)")
    m.add_argument("--secret-file", default=None, metavar="FILE",
                   help=f"the secret every launcher of a job on several machines shares (default: ${SECRET_ENV_VAR})")
    parser.add_argument("training_script", help="the training script (or module with -m)")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER, help="its arguments, untouched")


# --- interpretation ------------------------------------------------------------------------------
def parse_nnodes(value: str) -> int:
    """torchrun's "N" or "MIN:MAX"; only a fixed count (MIN == MAX) can be simulated."""
    parts = value.split(":")
    try:
        low, high = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]), int(parts[1]))
    except ValueError:
        low = high = -1
    if len(parts) > 2 or low < 1 or high < 1:
        raise TorchrunArgumentError(f"--nnodes must be a positive number N or N:N, got {value!r}")
    if low != high:
        raise TorchrunArgumentError(f"--nnodes {value}: an elastic range cannot be simulated; give the number "
                                    "of nodes to simulate, e.g. --nnodes 4")
    return low


def parse_nproc_per_node(value: str, gpus_per_node: int) -> int:
    """A number, or gpu/auto: every GPU of a node (as torchrun on a GPU machine)."""
    if value in ("gpu", "auto"):
        return gpus_per_node
    try:
        n = int(value)
    except ValueError:
        raise TorchrunArgumentError(f"--nproc-per-node must be a number, gpu or auto, got {value!r}") from None
    if n < 1:
        raise TorchrunArgumentError(f"--nproc-per-node must be >= 1, got {n}")
    return n


def parse_local_ranks_filter(value: str) -> frozenset[int] | None:
    if not value:
        return None
    try:
        ranks = frozenset(int(v) for v in value.split(","))
    except ValueError:
        raise TorchrunArgumentError("--local-ranks-filter must be a comma-separated list of integers, "
                                    f"e.g. --local-ranks-filter=0,1,2; got {value!r}") from None
    return ranks


def program_spec(args: argparse.Namespace, python_program: Callable[[list[str]], ProgramSpec]) -> ProgramSpec:
    """The program torchrun would run: `python -u SCRIPT`, `python -m MODULE`, or the script itself."""
    script, rest = args.training_script, list(args.training_script_args)
    if args.run_path:
        return _existing_script(script, rest)
    if args.no_python:
        if args.module:
            raise TorchrunArgumentError("don't use both --no-python and --module (as torchrun)")
        if not Path(script).name.startswith("python"):
            raise TorchrunArgumentError(f"--no-python runs {script!r} directly, but Phantora can only simulate "
                                        "Python programs: use --no-python python SCRIPT, or drop --no-python")
        return python_program([script, *rest])
    if args.module:
        return ProgramSpec(module=script, args=rest)
    return _existing_script(script, rest)


def _existing_script(script: str, args: list[str]) -> ProgramSpec:
    if not Path(script).is_file():
        raise TorchrunArgumentError(f"script not found: {script}")
    return ProgramSpec(script=script, args=args)


def run_id(args: argparse.Namespace, nnodes: int) -> str:
    """torchrun's run id: a fresh uuid for --standalone, and for a single-node static rendezvous with no
    endpoint or port given (torchrun switches those to c10d); else --rdzv-id."""
    auto = args.rdzv_backend == "static" and not args.rdzv_endpoint and args.master_port is None and nnodes == 1
    return str(uuid.uuid4()) if args.standalone or auto else args.rdzv_id


def master_port(args: argparse.Namespace) -> int | None:
    """MASTER_PORT: --master-port with torchrun's static rendezvous; with --standalone or another backend
    torchrun ignores it and its agent picks a free port (torch/distributed/launcher/api.py,
    `_get_addr_and_port`), as None does here."""
    static = args.rdzv_backend == "static" and not args.standalone
    return args.master_port if static else None


def spans_machines(args: argparse.Namespace, nnodes: int) -> bool:
    """Whether the command is one launcher of several: several nodes, and it says where they meet."""
    endpoint = args.rdzv_endpoint and not args.standalone
    placed = args.node_rank is not None or args.master_addr not in _LOCAL_ADDRESSES
    return nnodes > 1 and bool(endpoint or placed)


def rendezvous_spec(args: argparse.Namespace, nnodes: int) -> RendezvousSpec | None:
    """Where the launchers of a job on several machines meet, this one's node, and their secret; None when
    every node runs here. As torchrun: the endpoint is --rdzv-endpoint, or under the static backend
    --master-addr:--master-port; the static backend takes the node rank from --node-rank, the others hand it
    out (the endpoint's machine is node 0)."""
    if not spans_machines(args, nnodes):
        return None
    static, node_rank = args.rdzv_backend == "static", args.node_rank or 0
    if args.rdzv_endpoint:
        host, port = _endpoint(args.rdzv_endpoint)
    else:
        host, port = args.master_addr, args.master_port or _DEFAULT_MASTER_PORT
    if static and not 0 <= node_rank < nnodes:
        raise TorchrunArgumentError(f"--node-rank must be in 0..{nnodes - 1} for --nnodes {nnodes}, got {node_rank}")
    return RendezvousSpec(host=host, port=port, node_rank=node_rank if static else None,
                          secret=read_secret(args.secret_file), join_timeout_s=_join_timeout(args.rdzv_conf))


def _endpoint(value: str) -> tuple[str, int]:
    host, colon, port = value.rpartition(":")
    if not colon or host.endswith(":") or "]" in port:  # no port, or a bare IPv6 address
        host, port = value, str(_DEFAULT_RDZV_PORT)
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not host or not 0 < number < 65536:
        raise TorchrunArgumentError(f"--rdzv-endpoint must be HOST or HOST:PORT, got {value!r}")
    return host, number


def _join_timeout(rdzv_conf: str) -> float:
    """--rdzv-conf's join_timeout (torchrun's c10d option: how long the launchers wait for each other)."""
    for item in filter(None, rdzv_conf.split(",")):
        key, _, value = item.partition("=")
        if key.strip() == "join_timeout":
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if seconds <= 0:
                raise TorchrunArgumentError(f"--rdzv-conf join_timeout must be a number of seconds > 0, got {value!r}")
            return seconds
    return DEFAULT_JOIN_TIMEOUT_S


def read_secret(path: str | None) -> str:
    """The launchers' shared secret: --secret-file's contents, else $PHANTORA_SECRET. Required: the coordinator
    and the rendezvous then accept only this job's launchers and ranks."""
    if path:
        try:
            secret = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise TorchrunArgumentError(f"cannot read --secret-file {path}: {getattr(error, 'strerror', None) or error}") from None
    else:
        secret = os.environ.get(SECRET_ENV_VAR, "").strip()
    if not secret:
        raise TorchrunArgumentError("a job on several launchers needs a shared secret, the same for every launcher: "
                                    f"--secret-file FILE or ${SECRET_ENV_VAR} (e.g. from `openssl rand -hex 32`)")
    if len(secret) < _MIN_SECRET_CHARS:
        raise TorchrunArgumentError(f"the shared secret has {len(secret)} characters; use at least {_MIN_SECRET_CHARS} "
                                    "(e.g. `openssl rand -hex 32`)")
    return secret


def ignored_notes(args: argparse.Namespace, *, several_launchers: bool = False) -> list[str]:
    """One note naming every given option that has no effect here (with several launchers, the node rank,
    master address and endpoint place this one)."""
    unused = []
    if not several_launchers:
        if args.node_rank:
            unused.append(f"--node-rank {args.node_rank}")
        if args.master_addr not in _LOCAL_ADDRESSES:
            unused.append(f"--master-addr {args.master_addr}")
        if args.rdzv_endpoint and not args.standalone:
            unused.append(f"--rdzv-endpoint {args.rdzv_endpoint}")
    if args.local_addr:
        unused.append(f"--local-addr {args.local_addr}")
    notes = []
    if unused:
        notes.append("every node is simulated on this machine (MASTER_ADDR=127.0.0.1); not used: " + ", ".join(unused))
    if args.max_restarts:
        notes.append(f"--max-restarts {args.max_restarts}: a failed simulation is not restarted (it would fail "
                     "the same way)")
    return notes


@dataclass(frozen=True, slots=True)
class TorchrunPlan:
    """What the torchrun arguments mean, before the cluster is known."""

    nnodes: int
    nproc_spec: str
    program: ProgramSpec
    torchrun: TorchrunEnv
    output: OutputConfig
    shutdown_grace_s: float
    monitor_interval_s: float
    notes: list[str]
    rendezvous: RendezvousSpec | None = None
    """One launcher of several (cli/multinode.py); None: every node runs here."""


def torchrun_plan(args: argparse.Namespace, out_dir: str,
                  python_program: Callable[[list[str]], ProgramSpec]) -> TorchrunPlan:
    """Interpret the torchrun options (raises TorchrunArgumentError with a one-line reason)."""
    nnodes = parse_nnodes(args.nnodes)
    if args.max_restarts < 0:
        raise TorchrunArgumentError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if args.monitor_interval <= 0:
        raise TorchrunArgumentError(f"--monitor-interval must be > 0, got {args.monitor_interval}")
    try:
        redirects = parse_std(args.redirects, option="--redirects")
        tee = parse_std(args.tee, option="--tee")
    except ValueError as error:
        raise TorchrunArgumentError(str(error)) from None
    output = OutputConfig(
        prefix_template=(args.log_line_prefix_template or os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
                         or DEFAULT_PREFIX_TEMPLATE),
        local_ranks_filter=parse_local_ranks_filter(args.local_ranks_filter),
        redirects=redirects, tee=tee, log_dir=args.log_dir or str(Path(out_dir) / "logs"))
    rendezvous = rendezvous_spec(args, nnodes)
    # with several launchers --master-port is the rendezvous's; node 0 picks rank 0's store port
    env = TorchrunEnv(run_id=run_id(args, nnodes), role=args.role, max_restarts=args.max_restarts,
                      master_port=None if rendezvous else master_port(args), virtual_local_rank=args.virtual_local_rank)
    grace = args.shutdown_timeout
    if grace is None:
        variable = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
        grace = _env_value(variable, os.environ.get(variable, str(_DEFAULT_SHUTDOWN_TIMEOUT_S)), int)
    if grace < 0:
        raise TorchrunArgumentError(f"--shutdown-timeout must be >= 0, got {grace}")
    return TorchrunPlan(nnodes=nnodes, nproc_spec=args.nproc_per_node, program=program_spec(args, python_program),
                        torchrun=env, output=output, shutdown_grace_s=float(grace),
                        monitor_interval_s=args.monitor_interval,
                        notes=ignored_notes(args, several_launchers=rendezvous is not None), rendezvous=rendezvous)

