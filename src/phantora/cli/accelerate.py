"""`phantora accelerate launch`: what `accelerate launch [options] train.py ARGS` would start, simulated.

Accelerate's own code decides everything (accelerate/commands/launch.py, Accelerate 1.15):
`launch_command_parser` parses the options; `launch_command` fills the defaults from the config file
(`--config_file`, or the default one `accelerate config` writes) in `_validate_launch_command`, and
picks a launcher. Phantora replaces only those launchers, which would start processes, by ones that
record what Accelerate prepared for them (`_recording_launchers`):
- `simple_launcher` (one process): the environment of `prepare_simple_launcher_cmd_env`; simulated as
  `phantora run` runs a program;
- `multi_gpu_launcher` (DDP, FSDP 1 and 2, Megatron-LM): the environment of `prepare_multi_gpu_env`,
  and the torchrun arguments Accelerate hands `torch.distributed.run` (its `_filter_args` over torch's
  own parser); simulated as `phantora torchrun` runs them;
- `deepspeed_launcher`: the environment of `prepare_deepspeed_cmd_env`, and either those torchrun
  arguments or, for several machines with a DeepSpeed multi-node launcher, the `deepspeed` command line
  it builds; simulated as `phantora deepspeed` runs it.
So mixed precision, FSDP, DeepSpeed-plugin and dynamo settings reach the program as Accelerate's own
variables (ACCELERATE_*, FSDP_*), computed by Accelerate. While its code runs it sees this machine as one
node of the simulated cluster (cli/frameworks.py, `simulated_node`): with no config file and no
`--num_processes`, that is every GPU of a node, as on a GPU machine.

What differs because everything runs on this machine: `--cpu`, TPU and SageMaker launches are errors
(nothing to simulate, or not a GPU job); `--machine_rank`, `--main_process_ip` and `--same_network` are
not used (every machine is simulated here, MASTER_ADDR=127.0.0.1); Accelerate's check for consumer GPUs
without peer-to-peer support (`check_cuda_p2p_ib_support`) is skipped: no simulated GPU is one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal

from phantora.cli.frameworks import (
    FrameworkLauncherError,
    added_variables,
    import_framework,
    one_line,
    parse_quietly,
    simulated_node,
)
from phantora.cli.torchrun import add_torchrun_arguments

INSTALL = "pip install accelerate==1.15.0  # Phantora's frameworks extra"
_LAUNCHERS = ("simple_launcher", "multi_gpu_launcher", "deepspeed_launcher", "tpu_launcher", "tpu_pod_launcher",
              "sagemaker_launcher")
_ACCELERATE_ERRORS = (ValueError, TypeError, OSError, ImportError, AssertionError, RuntimeError, KeyError)
"""What Accelerate's validation and launch helpers raise for a bad option or config file."""


@dataclass(frozen=True, slots=True)
class AccelerateLaunch:
    """What `accelerate launch` would start."""

    kind: Literal["simple", "torchrun", "deepspeed"]
    env: dict[str, str]
    """Accelerate's variables for the workers: what its environment adds to the launcher's."""
    args: argparse.Namespace
    """The arguments Accelerate passes torch.distributed.run (for `simple`, only the program in them counts:
    training_script, module, no_python and the script's arguments)."""
    deepspeed_words: list[str] = field(default_factory=list)
    """deepspeed: the `deepspeed` command line after `deepspeed`."""
    notes: list[str] = field(default_factory=list)


def launch_module() -> ModuleType:
    return import_framework("accelerate.commands.launch", command="accelerate launch", install=INSTALL)


def accelerate_help() -> str:
    """Accelerate's own `accelerate launch` option list, or why there is none."""
    try:
        return launch_module().launch_command_parser().format_help()
    except FrameworkLauncherError as error:
        return str(error)


def accelerate_launch(words: list[str], *, node_gpus: int, compute_capability: tuple[int, int]) -> AccelerateLaunch:
    """Run Accelerate's `launch_command` on `words` (options, script, its arguments) as on a node of
    `node_gpus` GPUs, and return what its launcher would start. Raises FrameworkLauncherError (one line)."""
    launch = launch_module()
    args = parse_quietly(launch.launch_command_parser().parse_args, words, prog="accelerate launch")
    recorded: list[AccelerateLaunch] = []
    try:
        with simulated_node(node_gpus, compute_capability), _recording_launchers(launch, recorded):
            launch.launch_command(args)
    except FrameworkLauncherError:
        raise
    except _ACCELERATE_ERRORS as error:
        raise FrameworkLauncherError(f"accelerate launch: {one_line(error)}") from None
    assert len(recorded) == 1, "launch_command calls exactly one launcher"
    return recorded[0]


@contextmanager
def _recording_launchers(launch: ModuleType, recorded: list[AccelerateLaunch]) -> Iterator[None]:
    """Replace the launchers `launch_command` picks from by ones that record instead of starting processes."""
    replacements: dict[str, Callable[[argparse.Namespace], None]] = {
        "simple_launcher": lambda args: recorded.append(_simple(launch, args)),
        "multi_gpu_launcher": lambda args: recorded.append(_multi_gpu(launch, args)),
        "deepspeed_launcher": lambda args: recorded.append(_deepspeed(launch, args)),
        "tpu_launcher": _refuse("a TPU launch (distributed_type XLA)"),
        "tpu_pod_launcher": _refuse("a TPU pod launch"),
        "sagemaker_launcher": _refuse("a SageMaker launch (compute_environment AMAZON_SAGEMAKER)"),
    }
    saved = {name: getattr(launch, name) for name in _LAUNCHERS}
    for name, replacement in replacements.items():
        setattr(launch, name, replacement)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(launch, name, function)


def _refuse(what: str) -> Callable[[argparse.Namespace], None]:
    def refuse(args: argparse.Namespace) -> None:
        raise FrameworkLauncherError(f"accelerate launch: {what} is not a CUDA GPU job; Phantora simulates NVIDIA "
                                     "GPUs (use a config with distributed_type NO, MULTI_GPU, FSDP or DEEPSPEED)")
    return refuse


def _simple(launch: ModuleType, args: argparse.Namespace) -> AccelerateLaunch:
    """One process: `simple_launcher`'s command and environment."""
    if args.cpu or getattr(args, "use_cpu", False):
        raise FrameworkLauncherError("accelerate launch: --cpu (use_cpu in the config file) trains on the CPU; "
                                     "Phantora simulates GPUs: drop it")
    if args.mpirun_hostfile is not None:
        raise FrameworkLauncherError("accelerate launch: --mpirun_hostfile starts CPU processes through mpirun; "
                                     "Phantora simulates GPU jobs")
    _cmd, env = launch.prepare_simple_launcher_cmd_env(args)
    return AccelerateLaunch(kind="simple", env=added_variables(env), args=_torchrun_args(launch, args))


def _multi_gpu(launch: ModuleType, args: argparse.Namespace) -> AccelerateLaunch:
    """Several processes through torchrun: `multi_gpu_launcher`'s environment and torchrun arguments."""
    env = launch.prepare_multi_gpu_env(args)
    return AccelerateLaunch(kind="torchrun", env=added_variables(env), args=_torchrun_args(launch, args),
                            notes=_machine_notes(args))


def _deepspeed(launch: ModuleType, args: argparse.Namespace) -> AccelerateLaunch:
    """DeepSpeed: `deepspeed_launcher`'s environment, and its `deepspeed` command or torchrun arguments."""
    if not launch.is_deepspeed_available():
        raise FrameworkLauncherError("accelerate launch: the config uses DeepSpeed, which is not installed: "
                                     "DS_BUILD_OPS=0 pip install deepspeed==0.19.8")
    cmd, env = launch.prepare_deepspeed_cmd_env(args)
    if cmd is not None:  # several machines, a DeepSpeed multi-node launcher: Accelerate runs `deepspeed`
        return AccelerateLaunch(kind="deepspeed", env=added_variables(env), args=args, deepspeed_words=cmd[1:],
                                notes=_machine_notes(args))
    return AccelerateLaunch(kind="torchrun", env=added_variables(env), args=_torchrun_args(launch, args),
                            notes=_machine_notes(args))


def _torchrun_args(launch: ModuleType, args: argparse.Namespace) -> argparse.Namespace:
    """The arguments Accelerate passes torch.distributed.run (as in its multi_gpu_launcher); the ones that
    place this machine among several (node rank, rendezvous endpoint, master address) are not used here:
    they are named in Accelerate's terms by `_machine_notes`."""
    import torch.distributed.run as distributed_run

    torchrun = launch._filter_args(args, distributed_run.get_args_parser(),
                                   ["--training_script", args.training_script,
                                    "--training_script_args", args.training_script_args])
    # options `phantora torchrun` knows and this torch's torchrun lacks (2.14's --log-line-prefix-template on
    # 2.13) take their defaults: the plan reads every one; so do the ones that place this machine (unset)
    ours = argparse.ArgumentParser(add_help=False)
    add_torchrun_arguments(ours)
    for name, value in vars(ours.parse_args(["placeholder.py"])).items():
        if not hasattr(torchrun, name) or name in ("node_rank", "master_addr", "rdzv_endpoint"):
            setattr(torchrun, name, value)
    return torchrun


def _machine_notes(args: argparse.Namespace) -> list[str]:
    """One note naming the options that place this machine among several, which every simulated machine
    shares here."""
    given = [f"--{name} {getattr(args, name)}" for name in ("machine_rank", "main_process_ip")
             if getattr(args, name, None) not in (None, 0, "0", "")]
    if getattr(args, "same_network", False):
        given.append("--same_network")
    if not given:
        return []
    return ["every machine is simulated on this machine (MASTER_ADDR=127.0.0.1); not used: " + ", ".join(given)]
