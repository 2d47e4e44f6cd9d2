"""`phantora deepspeed`: what `deepspeed [options] train.py ARGS` would start, simulated.

DeepSpeed's own runner code parses the options and resolves the GPUs to use
(deepspeed/launcher/runner.py, DeepSpeed 0.19: `parse_args`, `fetch_hostfile`,
`parse_inclusion_exclusion`, `apply_num_nodes_and_gpus`, in the order of its `main`). Every worker
then gets what DeepSpeed's per-node launcher gives it (deepspeed/launcher/launch.py, `main`):
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK (node), CROSS_SIZE, MASTER_ADDR, MASTER_PORT
and CUDA_VISIBLE_DEVICES (its node's GPU ids), over the launcher's environment, and runs
`python -u SCRIPT --local_rank=N ARGS` (`-m MODULE`, `--no_local_rank` as DeepSpeed treats them).

The resource pool is the hostfile's (`--hostfile`, default /job/hostfile, when it exists), or else
one node, `localhost`, with every GPU of a simulated node (`--gpu`'s DGX/HGX, or the `--cluster`
file's gpus_per_node), as DeepSpeed counts the local GPUs; CUDA_VISIBLE_DEVICES in the launcher's
environment narrows it as in DeepSpeed. What differs because every node is simulated on this machine:
- several nodes start as DeepSpeed's default pdsh launcher starts them (launch.py on every node,
  the working folder first on PYTHONPATH, `.deepspeed_env` exported); pdsh and ssh are not used.
  The MPI and Slurm launchers start ranks another way (MPI's variables, no --local_rank): an error;
- MASTER_ADDR is 127.0.0.1, and MASTER_PORT a free port unless `--master_port` names another than
  DeepSpeed's default (29500), so that simulations can run side by side;
- `--autotuning` is an error: the autotuner measures trial runs (simulate each configuration instead);
- ssh, core binding, the pid file and the launcher's own log level have no effect (a note names them).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from phantora.cli.frameworks import (
    FrameworkLauncherError,
    help_text,
    import_framework,
    one_line,
    parse_quietly,
    simulated_node,
)
from phantora.cli.launch import DeepSpeedEnv, ProgramSpec
from phantora.cli.output import OutputConfig, Std

INSTALL = "DS_BUILD_OPS=0 pip install deepspeed==0.19.8  # Phantora's frameworks extra"
LOCAL_RANK_ARGUMENT = "--local_rank={local_rank}"
"""What launch.py puts after the script for each worker (not with --no_local_rank)."""
_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
_MULTI_NODE_LAUNCHER = "pdsh"
"""DeepSpeed's default multi-node launcher: launch.py on every node, which is what is simulated."""


@dataclass(frozen=True, slots=True)
class DeepSpeedPlan:
    """What the deepspeed command line means, before the cluster is built."""

    program: ProgramSpec
    workers: DeepSpeedEnv
    """launch.py's variables; its `visible_devices` are the nodes and their GPUs (one worker each)."""
    output: OutputConfig
    extra_env: dict[str, str] = field(default_factory=dict)
    """What DeepSpeed adds to the launcher's environment for every worker (multi-node: PYTHONPATH and
    `.deepspeed_env`), over the environment it was started with (`base_env`)."""
    notes: list[str] = field(default_factory=list)

    @property
    def nnodes(self) -> int:
        return len(self.workers.visible_devices)

    @property
    def nproc_per_node(self) -> int:
        return len(self.workers.visible_devices[0])


def runner_module(node_gpus: int, compute_capability: tuple[int, int]) -> ModuleType:
    """deepspeed.launcher.runner, imported as on a simulated node: DeepSpeed picks its CUDA accelerator
    (on this machine it would pick the CPU one and say so)."""
    with simulated_node(node_gpus, compute_capability):
        return import_framework("deepspeed.launcher.runner", command="deepspeed", install=INSTALL)


def deepspeed_help() -> str:
    """DeepSpeed's own option list (for `phantora deepspeed --help`), or why there is none."""
    try:
        runner = runner_module(1, (8, 0))  # any CUDA GPU: only DeepSpeed's accelerator choice depends on it
    except FrameworkLauncherError as error:
        return str(error)
    return help_text(runner.parse_args)


def deepspeed_plan(words: list[str], *, node_gpus: int, compute_capability: tuple[int, int], out_dir: str,
                   python_program: Callable[[list[str]], ProgramSpec],
                   base_env: Mapping[str, str] | None = None) -> DeepSpeedPlan:
    """Interpret `deepspeed` options and script (`words`) with DeepSpeed's runner, on nodes of `node_gpus`
    GPUs of that compute capability; `base_env` is the environment deepspeed would start in (default
    os.environ). Raises FrameworkLauncherError with a one-line reason."""
    runner = runner_module(node_gpus, compute_capability)
    base_env = dict(os.environ if base_env is None else base_env)
    args = parse_quietly(runner.parse_args, words, prog="deepspeed")
    if args.autotuning:
        raise FrameworkLauncherError(f"--autotuning {args.autotuning}: DeepSpeed's autotuner measures trial runs "
                                     "on real GPUs; simulate each configuration to compare them instead")
    notes: list[str] = []
    resources = _active_resources(runner, args, node_gpus, base_env, notes)
    multi_node = (args.force_multi or len(resources) > 1) and not args.no_ssh
    if multi_node and args.launcher.lower() != _MULTI_NODE_LAUNCHER:
        raise FrameworkLauncherError(
            f"--launcher {args.launcher}: that launcher starts ranks through {args.launcher} (its own variables, no "
            f"--local_rank), which Phantora does not reproduce; use the default pdsh launcher (DeepSpeed's "
            "launch.py on every node)")
    visible = tuple(tuple(slots) for slots in resources.values())
    highest = max(max(slots) for slots in visible)
    if highest >= node_gpus:  # --num_gpus takes GPUs 0..N-1 without checking the pool (as DeepSpeed)
        raise FrameworkLauncherError(f"GPU {highest} does not exist: a simulated node has {node_gpus} GPUs; "
                                     "ask for fewer (--num_gpus), or simulate larger nodes (--cluster)")
    counts = {len(slots) for slots in visible}
    if len(counts) > 1:
        per_node = ", ".join(f"{host}: {len(slots)}" for host, slots in resources.items())
        raise FrameworkLauncherError(f"the nodes would run different numbers of GPUs ({per_node}); Phantora "
                                     "simulates nodes of one size: give every node the same slots")
    extra_env = _multi_node_env(runner, base_env) if multi_node else {}
    notes += _unused_notes(args)
    port = args.master_port
    workers = DeepSpeedEnv(visible_devices=visible,
                           master_port=None if port == _default_port() else port)
    return DeepSpeedPlan(program=_program(args, python_program), workers=workers, output=_output(args, out_dir),
                         extra_env=extra_env, notes=notes)


def _default_port() -> int:
    from deepspeed.constants import TORCH_DISTRIBUTED_DEFAULT_PORT
    return TORCH_DISTRIBUTED_DEFAULT_PORT


def _active_resources(runner: ModuleType, args: argparse.Namespace, node_gpus: int, env: Mapping[str, str],
                      notes: list[str]) -> dict[str, list[int]]:
    """Host -> GPU ids to use, as DeepSpeed's runner `main` resolves them (its runner then drops
    CUDA_VISIBLE_DEVICES, which launch.py sets again for every worker)."""
    pool = None
    if os.path.isfile(args.hostfile):  # fetch_hostfile warns "proceeding with local resources" otherwise
        pool = _call(runner.fetch_hostfile, args.hostfile)
        for host, slots in pool.items():
            if slots > node_gpus:
                raise FrameworkLauncherError(f"hostfile {args.hostfile}: {host} has slots={slots}, but a simulated "
                                             f"node has {node_gpus} GPUs")
    elif args.hostfile != runner.DLTS_HOSTFILE:
        notes.append(f"hostfile {args.hostfile} not found: one node, localhost (as DeepSpeed proceeds)")
    visible = env.get(_VISIBLE_DEVICES, "")
    if not pool and visible:
        if args.include or args.exclude or args.num_nodes > 1 or args.num_gpus > 0:
            notes.append(f"{_VISIBLE_DEVICES}={visible} is ignored because --include/--exclude/--num_gpus/"
                         "--num_nodes was given (as DeepSpeed does)")
        else:
            args.include = f"localhost:{visible}"
    if (args.num_nodes >= 0 or args.num_gpus >= 0) and (args.include or args.exclude):
        raise FrameworkLauncherError("Cannot specify num_nodes/gpus with include/exclude (DeepSpeed)")
    if not pool:
        pool = {"localhost": node_gpus}
        if args.num_nodes > 1:
            raise FrameworkLauncherError(
                f"--num_nodes {args.num_nodes}: Num nodes is >1 but no extra nodes available via hostfile (DeepSpeed); "
                "write a hostfile with one line per node, e.g. 'node0 slots=8', and pass --hostfile FILE")
    resources = _call(runner.parse_inclusion_exclusion, pool, args.include, args.exclude)
    resources = runner.apply_num_nodes_and_gpus(resources, args.num_nodes, args.num_gpus)
    launcher_class = runner.LAUNCHER_CLASSES.get(args.launcher.lower())
    if launcher_class is not None:
        _call(launcher_class.validate_active_resources, resources)
    if not resources or not any(resources.values()):
        raise FrameworkLauncherError("no GPUs are left to run on after --include/--exclude/--num_gpus")
    if args.no_ssh and not 0 <= args.node_rank < len(resources):
        raise FrameworkLauncherError("Launching training without ssh, but --node_rank is not set correctly "
                                     f"(DeepSpeed): {args.node_rank} for {len(resources)} node(s)")
    return {host: list(slots) for host, slots in resources.items()}


def _call(function: Callable, *args):
    """A DeepSpeed helper; its ValueError (a bad hostfile or filter) becomes one line."""
    try:
        return function(*args)
    except ValueError as error:
        raise FrameworkLauncherError(one_line(error)) from None


def _multi_node_env(runner: ModuleType, env: Mapping[str, str]) -> dict[str, str]:
    """What DeepSpeed's runner adds for the workers of a multi-node job (`main`): the working folder first
    on PYTHONPATH, and the variables of `.deepspeed_env` (in ~ and the working folder) exported to every
    node. The rest of the launcher's environment reaches the simulated nodes anyway: they run here."""
    cwd = os.path.abspath(".")
    extra = {"PYTHONPATH": f"{cwd}:{env['PYTHONPATH']}" if "PYTHONPATH" in env else cwd}
    for folder in runner.DEEPSPEED_ENVIRONMENT_PATHS:
        path = Path(folder) / runner.DEEPSPEED_ENVIRONMENT_NAME
        if path.is_file():
            for line in path.read_text().splitlines():
                if "=" in line:
                    key, value = line.split("=", 1)
                    extra[key.strip()] = value.strip()
    return extra


def _program(args: argparse.Namespace, python_program: Callable[[list[str]], ProgramSpec]) -> ProgramSpec:
    """What launch.py runs: `python -u [-m] SCRIPT [--local_rank=N] ARGS`, or with --no_python the script
    itself, which must then be a Python interpreter (only Python is simulated)."""
    script, rest = args.user_script, list(args.user_args)
    rank_argument = None if args.no_local_rank else LOCAL_RANK_ARGUMENT
    if args.no_python:
        if args.module:
            raise FrameworkLauncherError("Don't use both the '--no_python' flag and the '--module' flag at the same "
                                         "time (DeepSpeed)")
        if not Path(script).name.startswith("python"):
            raise FrameworkLauncherError(f"--no_python runs {script!r} directly, but Phantora can only simulate Python "
                                         "programs: use --no_python --no_local_rank python SCRIPT, or drop --no_python")
        if rank_argument:
            raise FrameworkLauncherError(f"--no_python {script}: DeepSpeed would pass --local_rank=N to the "
                                         "interpreter itself; add --no_local_rank")
        return python_program([script, *rest])
    if args.module:
        return ProgramSpec(module=script, args=rest, rank_argument=rank_argument)
    if not Path(script).is_file():
        raise FrameworkLauncherError(f"script not found: {script}")
    return ProgramSpec(script=script, args=rest, rank_argument=rank_argument)


def _output(args: argparse.Namespace, out_dir: str) -> OutputConfig:
    """Lines as DeepSpeed shows them: unprefixed (whole lines here); --enable_each_rank_log DIR: each rank's
    stdout and stderr only in DIR/<start time>_rank<N>.log, as launch.py writes them."""
    folder = args.enable_each_rank_log
    if folder == "None":
        return OutputConfig(prefix_template="", log_dir=str(Path(out_dir) / "logs"))
    if os.path.isfile(folder):
        raise FrameworkLauncherError(f"--enable_each_rank_log {folder} should not be a file, it should be a "
                                     "directory (DeepSpeed)")
    started = time.strftime("%Y%m%d%H%M%S", time.localtime())
    return OutputConfig(prefix_template="", redirects=Std.ALL, log_dir=folder, log_file=f"{started}_rank{{rank}}.log")


def _unused_notes(args: argparse.Namespace) -> list[str]:
    """One note naming the given options that have no effect here."""
    unused = []
    if args.master_addr:
        unused.append(f"--master_addr {args.master_addr}")
    if args.no_ssh:
        unused.append(f"--no_ssh --node_rank {args.node_rank} (every node is simulated, not only this one)")
    if args.ssh_port is not None:
        unused.append(f"--ssh_port {args.ssh_port}")
    if args.launcher_args:
        unused.append(f"--launcher_args {args.launcher_args!r}")
    if args.venv_script:
        unused.append(f"--venv_script {args.venv_script} (ranks run in this Python environment)")
    if args.bind_cores_to_rank or args.bind_core_list:
        unused.append("--bind_cores_to_rank/--bind_core_list (this machine's cores are not the target's)")
    if args.save_pid:
        unused.append("--save_pid")
    if not unused:
        return []
    return ["every node is simulated on this machine (MASTER_ADDR=127.0.0.1); not used: " + ", ".join(unused)]
