"""`phantora` command line: parse -> LaunchConfig -> launch -> reports.

    phantora run --gpu h200 -- python train.py --batch 8
    phantora run --cluster cluster.toml --out results/ train.py --batch 8
    phantora torchrun --gpu h100 --nnodes 2 --nproc-per-node 8 train.py --batch 8
    phantora deepspeed --gpu h200 --num_gpus 2 train.py --deepspeed_config ds.json
    phantora accelerate launch --gpu h200 --config_file fsdp2.yaml train.py
    phantora profile phantora-out/ --out my_h200.jsonl      # measure the run's ops on this machine's GPU
    phantora run --gpu h200 --kernel-db my_h200.jsonl -- python train.py
    phantora sweep --grid batch=4,8 --gpu h100,h200 --max-memory 70 -- phantora run -- python train.py
    phantora report phantora-out/                           # rebuild report.html

Every command takes the same path: the launcher hosts the coordinator server and starts one rank
process per simulated GPU (one for `run`). `deepspeed` and `accelerate launch` take Phantora's options
first, then the framework's own, which its own code interprets (cli/deepspeed.py, cli/accelerate.py).
Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

from phantora import __version__
from phantora.cli.accelerate import accelerate_help, accelerate_launch
from phantora.cli.deepspeed import deepspeed_help, deepspeed_plan
from phantora.cli.frameworks import FrameworkLauncherError
from phantora.cli.launch import DEFAULT_RANK_ENTRY, RANKS_CHOICES, LaunchConfig, LaunchError, ProgramSpec, launch
from phantora.cli.output import OutputConfig
from phantora.cli.profile import start_on_the_fly
from phantora.cli.torchrun import (
    TorchrunArgumentError,
    add_torchrun_arguments,
    parse_nproc_per_node,
    program_spec,
    torchrun_plan,
)
from phantora.config.run import HOST_TIME_MODES, RankConfig, positive_finite
from phantora.models.host_contention import DEFAULT_HOST_CONTENTION, HOST_CONTENTION_CHOICES
from phantora.models.network import ClusterNetworkConfig
from phantora.profiler.command import add_profile_arguments, run_profile
from phantora.profiler.database import combined_database
from phantora.profiler.onthefly import OnTheFlyError
from phantora.specs import DeviceProfile, ProfileError, UnknownGpuError, apply_variant, known_gpus, load_profile
from phantora.specs.cluster import cluster_from_flags, cluster_from_toml, with_overrides


class CliError(Exception):
    """A user mistake on the command line: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line (CliError) instead of usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)")


def _add_phantora_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Phantora's own options (every simulating command); returns them, for `split_phantora_options`."""
    actions: list[argparse.Action] = []

    def option(group, *flags: str, **kwargs) -> None:
        actions.append(group.add_argument(*flags, **kwargs))

    p = parser.add_argument_group("phantora options")
    where = p.add_mutually_exclusive_group(required=True)
    option(where, "--gpu", help=f"GPU model: {', '.join(known_gpus())} (nodes as its DGX/HGX)")
    option(where, "--cluster", metavar="FILE.toml", help="cluster file (docs/models/network.md)")
    option(p, "--gpus-per-node", type=_positive_int, default=None, metavar="N",
           help="GPUs per simulated node, the NVLink domain (default: the GPUs torchrun starts per node, or the "
                "cluster file's gpus_per_node); as the cluster file's gpus_per_node")
    option(p, "--nic-gbps", type=_positive_float, default=None, metavar="GBITS",
           help="NIC bandwidth per GPU in Gb/s (default: the GPU's DGX/HGX NIC, or the cluster file's); as the "
                "cluster file's [nic] bandwidth_gbits_per_s")
    option(p, "--out", default="phantora-out", help="output folder (default phantora-out/)")
    option(p, "--strict", action="store_true",
           help="fail on ops that have no cost model instead of estimating them")
    option(p, "--no-kernel-db", action="store_true",
           help="ignore the shipped measured kernel times (--kernel-db files still count)")
    option(p, "--kernel-db", action="append", default=[], metavar="DB.jsonl",
           help="extra measured kernel database (`phantora profile` output), merged over the shipped "
                "one; repeatable, the last given wins ties")
    option(p, "--profile-on-the-fly", action="store_true",
           help="measure ops that no database has on this machine's real GPU, once, and cache them")
    option(p, "--profile-cache", metavar="DIR",
           help="on-the-fly cache folder (default $PHANTORA_CACHE_DIR or ~/.cache/phantora/kernels)")
    option(p, "--profile-device", default="cuda:0", help="GPU for on-the-fly profiling (default cuda:0)")
    option(p, "--no-trace", action="store_true", help="do not write trace.json")
    option(p, "--no-power-cap", action="store_true",
           help="never slow GEMMs and attention for the GPU's power limit (docs/models/power.md)")
    option(p, "--no-chip-variation", action="store_true",
           help="every GPU as fast as the mean chip; by default a job's GEMMs and attention run at the pace of its "
                "expected slowest chip (docs/models/power.md, Chip variation)")
    option(p, "--host-time", choices=HOST_TIME_MODES, default="model",
           help="how host (CPU) time between GPU ops is simulated: model = the host model's constants, "
                "deterministic (default); measured = the CPU time the script's own code takes on this "
                "machine, outside Phantora (varies with load; docs/models/host.md)")
    option(p, "--host-time-scale", type=_positive_float, default=None, metavar="FACTOR",
           help="the target host CPU's time for the same work over the reference CPU's (0.8: the target "
                "is 25%% faster; default 1): multiplies the host model's constants, or with --host-time "
                "measured the CPU time measured on this machine")
    option(p, "--host-contention", choices=HOST_CONTENTION_CHOICES, default=DEFAULT_HOST_CONTENTION,
           help="how contended the hosts' CPUs are, with the host model: none = dedicated server hosts of "
                "the CPU class the model was measured on (default); h200-vm = as on the H200 VMs the model "
                "was measured on, whose vCPUs are about 1.5x slower half of the time, so a job of several "
                "ranks waits for its slowest (docs/models/host.md, Contended hosts)")
    option(p, "--ranks", choices=RANKS_CHOICES, default="auto",
           help="which simulated ranks run a process: auto = for a job of several nodes, representative ranks "
                "that stand for the others where the program's process groups allow, every rank within one "
                "node (default); all = every rank (docs/launcher.md, Representative ranks)")
    option(p, "--progress", action=argparse.BooleanOptionalAction, default=None,
           help="a status line on stderr every few seconds (default: when stderr is a terminal)")
    option(p, "--hang-timeout", type=_positive_float, default=None, metavar="SECONDS",
           help="wall-clock seconds a rank may send nothing while a peer waits for it before it is "
                "stopped as hung, its Python stack in the report (default: the timeout of the process group "
                "the peer waits in, as NCCL's watchdog: init_process_group(timeout=...), else 600)")
    return actions


def _positive_int(text: str) -> int:
    """An integer >= 1 (argparse turns the error into one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    """A finite number > 0 (argparse turns the error into one line)."""
    try:
        return positive_finite(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="phantora", description=(
        "Simulate an unmodified PyTorch training program on GPUs it does not need: "
        "the script's own logs print simulated time; a summary follows."))
    parser.add_argument("--version", action="version", version=f"phantora {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="simulate a single-process script on one simulated GPU",
                              description="phantora run [options] -- python train.py ARGS")
    _add_phantora_options(run)
    run.add_argument("--devices", type=int, default=1, help="CUDA devices the process sees (default 1)")
    run.add_argument("program", nargs=argparse.REMAINDER,
                     help="the program: [python [-u]] SCRIPT ARGS | [python] -m MODULE ARGS")
    torchrun = commands.add_parser(
        "torchrun", help="simulate a torchrun job: one process per simulated GPU, torchrun's arguments",
        description="phantora torchrun [phantora options] [torchrun options] SCRIPT ARGS")
    _add_phantora_options(torchrun)
    add_torchrun_arguments(torchrun)
    deepspeed = commands.add_parser("deepspeed", help=DEEPSPEED.summary, add_help=False)
    deepspeed.add_argument("words", nargs=argparse.REMAINDER, help=DEEPSPEED.usage)
    accelerate = commands.add_parser("accelerate", help=ACCELERATE.summary,
                                     description="phantora accelerate launch ... (phantora accelerate launch --help)")
    accelerate_commands = accelerate.add_subparsers(dest="accelerate_command", required=True)
    accelerate_launch = accelerate_commands.add_parser("launch", help=ACCELERATE.summary, add_help=False)
    accelerate_launch.add_argument("words", nargs=argparse.REMAINDER, help=ACCELERATE.usage)
    commands.add_parser("sweep", add_help=False, help="simulate every combination of the program's options, "
                        "cluster and environment; a table, a plot and the fastest that fits (phantora sweep --help)")
    commands.add_parser("report", add_help=False, help="rebuild report.html of a run's or a sweep's folder")
    profile = commands.add_parser(
        "profile", help="measure recorded op signatures on this machine's GPU into a kernel database",
        description="phantora profile OPS.jsonl|OUT_DIR ... --out DB.jsonl  (or --script train.py ARGS)")
    add_profile_arguments(profile)
    return parser


# --- frameworks' own launchers ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FrameworkCommand:
    """A framework's launcher command that Phantora reproduces: Phantora's options first, then the
    framework's own, which its own code interprets."""

    words: tuple[str, ...]
    summary: str
    usage: str
    framework_help: Callable[[], str]
    """The framework's own option list (imports the framework)."""

    @property
    def name(self) -> str:
        return " ".join(self.words)


DEEPSPEED = FrameworkCommand(
    ("deepspeed",), "simulate what `deepspeed` would start: DeepSpeed's launcher options, read by DeepSpeed",
    "phantora deepspeed [phantora options] [deepspeed options] SCRIPT ARGS", deepspeed_help)
ACCELERATE = FrameworkCommand(
    ("accelerate", "launch"),
    "simulate what `accelerate launch` would start: its options and config file, read by Accelerate",
    "phantora accelerate launch [phantora options] [accelerate launch options] SCRIPT ARGS", accelerate_help)
FRAMEWORK_COMMANDS = (DEEPSPEED, ACCELERATE)


class _FrameworkHelp(argparse.Action):
    """-h/--help of a framework command: Phantora's options, then the framework's own."""

    def __init__(self, option_strings: list[str], dest: str, command: FrameworkCommand, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.command = command

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        print(parser.format_help())
        print(f"{self.command.name} options (the framework's own, after Phantora's):\n")
        print(self.command.framework_help())
        parser.exit()


def framework_parser(command: FrameworkCommand) -> tuple[argparse.ArgumentParser, list[argparse.Action]]:
    """The parser of Phantora's options for a framework command, and those options."""
    parser = _Parser(prog=f"phantora {command.name}", usage=command.usage, add_help=False, description=(
        f"{command.summary}. Phantora's options come first; the first word that is not one of them starts "
        f"the {command.name} options, the script and its arguments, passed to the framework's own parser."))
    actions = _add_phantora_options(parser)
    actions.append(parser.add_argument("-h", "--help", action=_FrameworkHelp, command=command,
                                       help="show Phantora's options and the framework's, then exit"))
    return parser, actions


def split_phantora_options(words: list[str], actions: list[argparse.Action]) -> tuple[list[str], list[str]]:
    """Phantora's options at the start of `words` (with their values), and the rest: from the first word that
    is not one of them (spelled out in full) on, everything belongs to the framework's launcher."""
    by_flag = {flag: action for action in actions for flag in action.option_strings}
    i = 0
    while i < len(words):
        flag, joined, _ = words[i].partition("=")
        action = by_flag.get(flag if words[i].startswith("--") else words[i])
        if action is None:
            break
        i += 2 if action.nargs != 0 and not joined else 1
    return words[:i], words[i:]


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """The arguments of any phantora command; a framework command's own options are left in
    `launcher_words`, for the framework to read."""
    for command in FRAMEWORK_COMMANDS:
        if tuple(argv[:len(command.words)]) == command.words:
            parser, actions = framework_parser(command)
            ours, theirs = split_phantora_options(argv[len(command.words):], actions)
            args = parser.parse_args(ours)
            args.command, args.launcher_words = command.name, theirs
            return args
    return build_parser().parse_args(argv)


def program_from_args(words: list[str]) -> ProgramSpec:
    """Strip a leading `--` and `python [flags]`; keep the script or `-m module` and its arguments."""
    words = list(words)
    if words and words[0] == "--":
        words = words[1:]
    if words and Path(words[0]).name.startswith("python"):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            if words[0] in ("-c",):
                raise CliError("python -c is not supported: put the program in a file")
            words = words[1:]
    if not words:
        raise CliError("no program given: phantora run --gpu h200 -- python train.py ARGS")
    if words[0] == "-m":
        if len(words) < 2:
            raise CliError("-m needs a module name")
        return ProgramSpec(module=words[1], args=words[2:])
    script = Path(words[0])
    if not script.is_file():
        raise CliError(f"script not found: {words[0]}")
    return ProgramSpec(script=str(script), args=words[1:])


# --- cluster --------------------------------------------------------------------------------------
def gpu_profile(name: str) -> DeviceProfile:
    """The profile of GPU `name` (`--gpu`, a cluster file's `gpu`): resolved here once and passed down."""
    try:
        return load_profile(name)
    except (UnknownGpuError, ProfileError) as error:
        raise CliError(str(error)) from None


def cluster_file(path: str) -> ClusterNetworkConfig:
    """The cluster from a TOML file; its `gpu` must name a GPU model Phantora has specs for."""
    try:
        cluster = cluster_from_toml(path)
    except ValueError as error:
        raise CliError(str(error)) from None
    gpu_profile(cluster.gpu)  # a GPU Phantora has a profile for
    return cluster


def what_if(args: argparse.Namespace, cluster: ClusterNetworkConfig) -> ClusterNetworkConfig:
    """The cluster with `--gpus-per-node` and `--nic-gbps` applied, as the cluster file's fields would be."""
    try:
        return with_overrides(cluster, gpus_per_node=args.gpus_per_node, nic_gbits_per_s=args.nic_gbps)
    except ValueError as error:
        given = [f"{flag} {value:g}" for flag, value in (("--gpus-per-node", args.gpus_per_node),
                                                          ("--nic-gbps", args.nic_gbps)) if value is not None]
        raise CliError(f"{', '.join(given)}: {error}") from None


def cluster_profile(cluster: ClusterNetworkConfig) -> DeviceProfile:
    """The profile of the cluster's GPU, its cluster file's `[variant]` applied."""
    profile = gpu_profile(cluster.gpu)
    if cluster.gpu_variant is None:
        return profile
    try:
        return apply_variant(profile, cluster.gpu_variant)
    except ValueError as error:
        raise CliError(f"[variant] {error}") from None


def cluster_from_gpu(gpu: str, *, nodes: int, gpus_per_node: int) -> ClusterNetworkConfig:
    try:
        return cluster_from_flags(gpu=gpu_profile(gpu).key, nodes=nodes, gpus_per_node=gpus_per_node)
    except ValueError as error:
        raise CliError(str(error)) from None


def _node_gpus(args: argparse.Namespace) -> int:
    """GPUs in one simulated node: `--gpus-per-node`, else the GPU family's node (its DGX/HGX)."""
    return args.gpus_per_node or gpu_profile(args.gpu).node.gpus_per_node


def _kernel_databases(paths: list[str], gpu: str) -> tuple[str, ...]:
    """--kernel-db files, checked here (format, GPU) so a bad one fails before any rank starts."""
    try:
        combined_database(gpu, paths, packaged=False)
    except OSError as error:
        raise CliError(f"--kernel-db: {error.filename}: {error.strerror}") from None
    except ValueError as error:
        raise CliError(f"--kernel-db: {error}") from None
    return tuple(str(Path(p).resolve()) for p in paths)


def _rank_config(args: argparse.Namespace, cluster: ClusterNetworkConfig, devices: int) -> RankConfig:
    key = gpu_profile(cluster.gpu).key
    variant = None if cluster.gpu_variant is None else cluster.gpu_variant.given()
    try:
        return RankConfig(gpu=key, gpu_variant=variant, devices_per_process=devices, out_dir=args.out,
                          strict=args.strict,
                          use_kernel_database=not args.no_kernel_db, trace=not args.no_trace,
                          kernel_databases=_kernel_databases(args.kernel_db, key), host_time=args.host_time,
                          host_time_scale=1.0 if args.host_time_scale is None else args.host_time_scale,
                          host_contention=args.host_contention)
    except ValueError as error:
        raise CliError(str(error)) from None


def _progress(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() if args.progress is None else args.progress


# --- configs --------------------------------------------------------------------------------------
def run_config_from_args(args: argparse.Namespace) -> LaunchConfig:
    """`phantora run`: one rank, its output straight to the terminal."""
    cluster = _one_gpu_cluster(args)
    return _one_process_config(args, cluster, program_from_args(args.program), devices=args.devices)


def _one_gpu_cluster(args: argparse.Namespace) -> ClusterNetworkConfig:
    cluster = cluster_file(args.cluster) if args.cluster else cluster_from_gpu(args.gpu, nodes=1, gpus_per_node=1)
    return what_if(args, cluster)


def _one_process_config(args: argparse.Namespace, cluster: ClusterNetworkConfig, program: ProgramSpec, *,
                        devices: int, extra_env: Mapping[str, str] | None = None) -> LaunchConfig:
    """One rank on one GPU of the cluster, its output straight to the terminal."""
    rank_config = _rank_config(args, cluster, devices)
    return _launch_config(program=program, rank_config=rank_config, cluster=cluster, extra_env=dict(extra_env or {}),
                          output=OutputConfig(prefix_template=None), progress=_progress(args),
                          power_cap=not args.no_power_cap, chip_variation=not args.no_chip_variation,
                          ranks=args.ranks)


def torchrun_config_from_args(args: argparse.Namespace) -> tuple[LaunchConfig, list[str]]:
    """`phantora torchrun`: the cluster from --gpu (nodes of --nproc-per-node GPUs) or --cluster; returns
    the config and notes on options that have no effect here."""
    return torchrun_config(args, args)


def torchrun_config(args: argparse.Namespace, torchrun_args: argparse.Namespace, *,
                    extra_env: Mapping[str, str] | None = None) -> tuple[LaunchConfig, list[str]]:
    """A torchrun job: Phantora's options from `args`, torchrun's from `torchrun_args` (the same namespace
    under `phantora torchrun`; what Accelerate hands torchrun under `accelerate launch`)."""
    try:
        plan = torchrun_plan(torchrun_args, args.out, program_from_args)
    except TorchrunArgumentError as error:
        raise CliError(str(error)) from None
    try:
        if args.cluster:
            cluster = what_if(args, cluster_file(args.cluster))
            nproc = parse_nproc_per_node(plan.nproc_spec, cluster.gpus_per_node)
        else:
            node_gpus = _node_gpus(args)
            nproc = parse_nproc_per_node(plan.nproc_spec, node_gpus)
            if nproc > node_gpus:
                raise CliError(f"--nproc-per-node {nproc} exceeds the {node_gpus} GPUs of a {args.gpu} node; use "
                               "more --nnodes, a larger --gpus-per-node or a --cluster file")
            # without --gpus-per-node the simulated nodes are the GPUs the job uses: every GPU keeps its own
            # NVLink port and NIC
            cluster = what_if(args, cluster_from_gpu(args.gpu, nodes=plan.nnodes,
                                                     gpus_per_node=args.gpus_per_node or nproc))
    except TorchrunArgumentError as error:
        raise CliError(str(error)) from None
    devices = 1 if plan.torchrun.virtual_local_rank else cluster.gpus_per_node
    config = _launch_config(program=plan.program, rank_config=_rank_config(args, cluster, devices),
                            cluster=cluster, nnodes=plan.nnodes, nproc_per_node=nproc, workers=plan.torchrun,
                            extra_env=dict(extra_env or {}), output=plan.output,
                            shutdown_grace_s=plan.shutdown_grace_s, monitor_interval_s=plan.monitor_interval_s,
                            progress=_progress(args), power_cap=not args.no_power_cap,
                            chip_variation=not args.no_chip_variation, ranks=args.ranks, rendezvous=plan.rendezvous)
    return config, plan.notes


def _simulated_node(args: argparse.Namespace) -> tuple[int, tuple[int, int]]:
    """GPUs of one simulated node and their compute capability: what a framework's launcher finds on it."""
    if args.cluster:
        cluster = what_if(args, cluster_file(args.cluster))
        return cluster.gpus_per_node, gpu_profile(cluster.gpu).spec.compute_capability
    return _node_gpus(args), gpu_profile(args.gpu).spec.compute_capability


def deepspeed_config_from_args(args: argparse.Namespace, words: list[str] | None = None, *,
                               extra_env: Mapping[str, str] | None = None) -> tuple[LaunchConfig, list[str]]:
    """`phantora deepspeed` (`words`: the deepspeed options, script and arguments; by default those of the
    command line); the nodes are the ones DeepSpeed would use, each a simulated node's GPUs that it uses."""
    extra_env = dict(extra_env or {})
    node_gpus, capability = _simulated_node(args)
    plan = deepspeed_plan(args.launcher_words if words is None else words, node_gpus=node_gpus,
                          compute_capability=capability, out_dir=args.out, python_program=program_from_args,
                          base_env={**os.environ, **extra_env})
    if args.cluster:
        cluster = cluster_file(args.cluster)
    else:
        cluster = cluster_from_gpu(args.gpu, nodes=plan.nnodes, gpus_per_node=args.gpus_per_node or plan.nproc_per_node)
    cluster = what_if(args, cluster)
    config = _launch_config(program=plan.program, rank_config=_rank_config(args, cluster, plan.nproc_per_node),
                            cluster=cluster, nnodes=plan.nnodes, nproc_per_node=plan.nproc_per_node,
                            workers=plan.workers, extra_env={**extra_env, **plan.extra_env}, output=plan.output,
                            progress=_progress(args), power_cap=not args.no_power_cap,
                            chip_variation=not args.no_chip_variation, ranks=args.ranks)
    return config, plan.notes


def accelerate_config_from_args(args: argparse.Namespace) -> tuple[LaunchConfig, list[str]]:
    """`phantora accelerate launch`: whatever Accelerate's launch_command would start, simulated as `run`,
    `torchrun` or `deepspeed` simulate it, with Accelerate's variables."""
    node_gpus, capability = _simulated_node(args)
    started = accelerate_launch(args.launcher_words, node_gpus=node_gpus, compute_capability=capability)
    if started.kind == "simple":
        cluster = _one_gpu_cluster(args)
        program = program_spec(started.args, program_from_args)
        return _one_process_config(args, cluster, program, devices=1, extra_env=started.env), started.notes
    if started.kind == "torchrun":
        config, notes = torchrun_config(args, started.args, extra_env=started.env)
    else:
        config, notes = deepspeed_config_from_args(args, started.deepspeed_words, extra_env=started.env)
    return config, started.notes + notes


def _launch_config(*, cluster: ClusterNetworkConfig, **kwargs) -> LaunchConfig:
    try:
        return LaunchConfig(cluster=cluster, profile=cluster_profile(cluster), **kwargs)
    except ValueError as error:  # world size vs cluster and the like
        raise CliError(str(error)) from None


def config_from_args(args: argparse.Namespace) -> tuple[LaunchConfig, list[str]]:
    config, notes = _command_config(args)
    return replace(config, hang_timeout_s=args.hang_timeout), notes


def _command_config(args: argparse.Namespace) -> tuple[LaunchConfig, list[str]]:
    if args.command == "torchrun":
        return torchrun_config_from_args(args)
    try:
        if args.command == DEEPSPEED.name:
            return deepspeed_config_from_args(args)
        if args.command == ACCELERATE.name:
            return accelerate_config_from_args(args)
    except FrameworkLauncherError as error:
        raise FrameworkLauncherError(_misplaced_option_hint(str(error), args.command)) from None
    return run_config_from_args(args), []


def _misplaced_option_hint(message: str, command: str) -> str:
    """A framework's "unrecognized arguments" that are Phantora's options: say where they go."""
    _, found, words = message.partition("unrecognized arguments: ")
    ours = {flag for action in _add_phantora_options(argparse.ArgumentParser()) for flag in action.option_strings}
    if found and any(word.partition("=")[0] in ours for word in words.split()):
        return f"{message} (Phantora's options come before the {command} options)"
    return message


def _prepare_native_shim() -> None:
    """Compile the rank runtime's native shim once, here, rather than in every rank at the same time."""
    from phantora.runtime.native import NativeBuildError, build_shim
    try:
        build_shim()
    except NativeBuildError as error:
        raise LaunchError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["sweep"], ["report"]):  # commands of their own that start phantora runs or read their outputs
        from phantora.cli.sweep.command import report_main, sweep_main
        return sweep_main(argv[1:]) if argv[0] == "sweep" else report_main(argv[1:])
    worker = None
    try:
        args = parse_command_line(argv)
        if args.command == "profile":
            return run_profile(args)
        config, notes = config_from_args(args)
        for note in notes:
            print(f"phantora: note: {note}", file=sys.stderr)
        if config.rank_entry == DEFAULT_RANK_ENTRY:
            _prepare_native_shim()
        if args.profile_on_the_fly:
            config, worker = start_on_the_fly(config, cache_dir=args.profile_cache, device=args.profile_device)
        return launch(config)
    except (CliError, LaunchError, TorchrunArgumentError, FrameworkLauncherError, OnTheFlyError) as error:
        print(f"phantora: error: {error}", file=sys.stderr)
        return 2
    finally:
        if worker is not None:
            worker.stop()


if __name__ == "__main__":
    sys.exit(main())
