"""`phantora` command line: parse -> LaunchConfig -> launch -> reports.

    phantora run --gpu h200 -- python train.py --batch 8
    phantora run --cluster cluster.toml --out results/ train.py --batch 8
    phantora torchrun --gpu h100 --nnodes 2 --nproc-per-node 8 train.py --batch 8
    phantora profile phantora-out/ --out my_h200.jsonl      # measure the run's ops on this machine's GPU
    phantora run --gpu h200 --kernel-db my_h200.jsonl -- python train.py

Both commands take the same path: the launcher hosts the coordinator server and starts one rank
process per simulated GPU (one for `run`). Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from phantora import __version__
from phantora.cli.launch import DEFAULT_RANK_ENTRY, LaunchConfig, LaunchError, ProgramSpec, launch
from phantora.cli.output import OutputConfig
from phantora.cli.profile import add_profile_arguments, run_profile, start_on_the_fly
from phantora.cli.torchrun import (
    TorchrunArgumentError,
    add_torchrun_arguments,
    parse_nproc_per_node,
    torchrun_plan,
)
from phantora.config.run import HOST_TIME_MODES, RankConfig, positive_finite
from phantora.models.host_contention import HOST_CONTENTION
from phantora.models.network import GPU_FAMILY_DEFAULTS, ClusterNetworkConfig, cluster_from_flags, cluster_from_toml
from phantora.profiler.database import combined_database
from phantora.profiler.onthefly import OnTheFlyError
from phantora.specs import UnknownGpuError, get_gpu_spec, load_gpu_specs


class CliError(Exception):
    """A user mistake on the command line: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line (CliError) instead of usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)")


def _add_phantora_options(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("phantora options")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--gpu", help=f"GPU model: {', '.join(sorted(load_gpu_specs()))} (nodes as its DGX/HGX)")
    where.add_argument("--cluster", metavar="FILE.toml", help="cluster file (docs/network-model.md)")
    p.add_argument("--out", default="phantora-out", help="output folder (default phantora-out/)")
    p.add_argument("--strict", action="store_true",
                   help="fail on ops that have no cost model instead of estimating them")
    p.add_argument("--no-kernel-db", action="store_true",
                   help="ignore the shipped measured kernel times (--kernel-db files still count)")
    p.add_argument("--kernel-db", action="append", default=[], metavar="DB.jsonl",
                   help="extra measured kernel database (`phantora profile` output), merged over the shipped "
                        "one; repeatable, the last given wins ties")
    p.add_argument("--profile-on-the-fly", action="store_true",
                   help="measure ops that no database has on this machine's real GPU, once, and cache them")
    p.add_argument("--profile-cache", metavar="DIR",
                   help="on-the-fly cache folder (default $PHANTORA_CACHE_DIR or ~/.cache/phantora/kernels)")
    p.add_argument("--profile-device", default="cuda:0", help="GPU for on-the-fly profiling (default cuda:0)")
    p.add_argument("--no-trace", action="store_true", help="do not write trace.json")
    p.add_argument("--no-power-cap", action="store_true",
                   help="never slow GEMMs and attention for the GPU's power limit (docs/compute-model.md, Power cap)")
    p.add_argument("--host-time", choices=HOST_TIME_MODES, default="model",
                   help="how host (CPU) time between GPU ops is simulated: model = the host model's constants, "
                        "deterministic (default); measured = the CPU time the script's own code takes on this "
                        "machine, outside Phantora (varies with load; docs/compute-model.md, Host model)")
    p.add_argument("--host-time-scale", type=_positive_float, default=None, metavar="FACTOR",
                   help="the target host CPU's time for the same work over the reference CPU's (0.8: the target "
                        "is 25%% faster; default 1): multiplies the host model's constants, or with --host-time "
                        "measured the CPU time measured on this machine")
    p.add_argument("--host-contention", choices=tuple(HOST_CONTENTION), default="h200-vm",
                   help="how contended the hosts' CPUs are, with the host model: h200-vm = as on the H200 machines "
                        "the model was measured on, whose vCPUs are about 1.5x slower half of the time, so a job "
                        "of several ranks waits for its slowest (default); none = dedicated hosts "
                        "(docs/compute-model.md, Contended hosts)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a status line on stderr every few seconds (default: when stderr is a terminal)")


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
    profile = commands.add_parser(
        "profile", help="measure recorded op signatures on this machine's GPU into a kernel database",
        description="phantora profile OPS.jsonl|OUT_DIR ... --out DB.jsonl  (or --script train.py ARGS)")
    add_profile_arguments(profile)
    return parser


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
def _gpu_key(name: str) -> str:
    try:
        return get_gpu_spec(name).key
    except UnknownGpuError as error:
        raise CliError(str(error)) from None


def cluster_file(path: str) -> ClusterNetworkConfig:
    """The cluster from a TOML file; its `gpu` must name a GPU model Phantora has specs for."""
    try:
        cluster = cluster_from_toml(path)
    except ValueError as error:
        raise CliError(str(error)) from None
    _gpu_key(cluster.gpu)
    return cluster


def cluster_from_gpu(gpu: str, *, nodes: int, gpus_per_node: int) -> ClusterNetworkConfig:
    try:
        return cluster_from_flags(gpu=_gpu_key(gpu), nodes=nodes, gpus_per_node=gpus_per_node)
    except ValueError as error:
        raise CliError(str(error)) from None


def _node_gpus(gpu: str) -> int:
    """GPUs in one node of the GPU's family (its DGX/HGX)."""
    return GPU_FAMILY_DEFAULTS[_gpu_key(gpu)].gpus_per_node


def _kernel_databases(paths: list[str], gpu: str) -> tuple[str, ...]:
    """--kernel-db files, checked here (format, GPU) so a bad one fails before any rank starts."""
    try:
        combined_database(gpu, paths, packaged=False)
    except OSError as error:
        raise CliError(f"--kernel-db: {error.filename}: {error.strerror}") from None
    except ValueError as error:
        raise CliError(f"--kernel-db: {error}") from None
    return tuple(str(Path(p).resolve()) for p in paths)


def _rank_config(args: argparse.Namespace, gpu: str, devices: int) -> RankConfig:
    key = _gpu_key(gpu)
    try:
        return RankConfig(gpu=key, devices_per_process=devices, out_dir=args.out, strict=args.strict,
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
    if args.cluster:
        cluster = cluster_file(args.cluster)
    else:
        cluster = cluster_from_gpu(args.gpu, nodes=1, gpus_per_node=1)
    rank_config = _rank_config(args, cluster.gpu, args.devices)
    program = program_from_args(args.program)
    return _launch_config(program=program, rank_config=rank_config, cluster=cluster,
                          output=OutputConfig(prefix_template=None), progress=_progress(args),
                          power_cap=not args.no_power_cap)


def torchrun_config_from_args(args: argparse.Namespace) -> tuple[LaunchConfig, list[str]]:
    """`phantora torchrun`: the cluster from --gpu (nodes of --nproc-per-node GPUs) or --cluster; returns
    the config and notes on options that have no effect here."""
    try:
        plan = torchrun_plan(args, args.out, program_from_args)
    except TorchrunArgumentError as error:
        raise CliError(str(error)) from None
    try:
        if args.cluster:
            cluster = cluster_file(args.cluster)
            nproc = parse_nproc_per_node(plan.nproc_spec, cluster.gpus_per_node)
        else:
            node_gpus = _node_gpus(args.gpu)
            nproc = parse_nproc_per_node(plan.nproc_spec, node_gpus)
            if nproc > node_gpus:
                raise CliError(f"--nproc-per-node {nproc} exceeds the {node_gpus} GPUs of a {args.gpu} node; use "
                               "more --nnodes, or a --cluster file with a larger gpus_per_node")
            # the simulated nodes are the GPUs the job uses: every GPU keeps its own NVLink port and NIC
            cluster = cluster_from_gpu(args.gpu, nodes=plan.nnodes, gpus_per_node=nproc)
    except TorchrunArgumentError as error:
        raise CliError(str(error)) from None
    devices = 1 if plan.torchrun.virtual_local_rank else cluster.gpus_per_node
    config = _launch_config(program=plan.program, rank_config=_rank_config(args, cluster.gpu, devices),
                            cluster=cluster, nnodes=plan.nnodes, nproc_per_node=nproc, workers=plan.torchrun,
                            output=plan.output, shutdown_grace_s=plan.shutdown_grace_s,
                            monitor_interval_s=plan.monitor_interval_s, progress=_progress(args),
                            power_cap=not args.no_power_cap)
    return config, plan.notes


def _launch_config(**kwargs) -> LaunchConfig:
    try:
        return LaunchConfig(**kwargs)
    except ValueError as error:  # world size vs cluster and the like
        raise CliError(str(error)) from None


def config_from_args(args: argparse.Namespace) -> tuple[LaunchConfig, list[str]]:
    if args.command == "torchrun":
        return torchrun_config_from_args(args)
    return run_config_from_args(args), []


def _prepare_native_shim() -> None:
    """Compile the rank runtime's native shim once, here, rather than in every rank at the same time."""
    from phantora.runtime.native import NativeBuildError, build_shim
    try:
        build_shim()
    except NativeBuildError as error:
        raise LaunchError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    worker = None
    try:
        args = build_parser().parse_args(argv)
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
    except (CliError, LaunchError, TorchrunArgumentError, OnTheFlyError) as error:
        print(f"phantora: error: {error}", file=sys.stderr)
        return 2
    finally:
        if worker is not None:
            worker.stop()


if __name__ == "__main__":
    sys.exit(main())
