"""The command line is an interface: its commands and flags change only on purpose. A flag added, removed,
renamed or given a new default fails here; update FROZEN (and the docs that list the flag) in the same change."""

import argparse

from phantora.cli.main import DEEPSPEED, build_parser, framework_parser
from phantora.cli.sweep.command import sweep_parser

FROZEN_COMMANDS = ["run", "torchrun", "deepspeed", "accelerate", "sweep", "report", "profile"]
PHANTORA_OPTIONS = {
    "--gpu": None, "--cluster": None, "--gpus-per-node": None, "--nic-gbps": None, "--out": "phantora-out", "--strict": False, "--no-kernel-db": False,
    "--kernel-db": [], "--profile-on-the-fly": False, "--profile-cache": None, "--profile-device": "cuda:0",
    "--no-trace": False, "--no-power-cap": False, "--no-chip-variation": False, "--host-time": "model",
    "--host-time-scale": None,
    "--host-contention": "none", "--ranks": "auto", "--progress --no-progress": None, "--hang-timeout": None,
}
"""Phantora's own options, the same on every simulating command, with their defaults."""
FROZEN_RUN = {"-h --help": argparse.SUPPRESS, **PHANTORA_OPTIONS, "--devices": 1}
"""`phantora run --help`'s options."""
FROZEN_PROFILE = {
    "-h --help": argparse.SUPPRESS, "--out": None, "--gpu": None, "--device": "cuda:0", "--warmup": 3, "--repeat": 5,
    "--hot": False, "--timer": None, "--only-missing": False, "--against": [], "--limit": None,
    "--time-limit": None, "--report": None, "--sim-out": None, "--script": None,
}

FROZEN_SWEEP = {
    "-h --help": argparse.SUPPRESS, "--grid": None, "--toggle": None, "--gpu": None, "--cluster": None,
    "--nnodes": None, "--gpus-per-node": None, "--nic-gbps": None, "--env": None, "--out": "phantora-sweep",
    "--max-memory": None, "--metric": [], "--jobs": None, "--ray": None, "--ray-cpus": 1.0, "--ray-working-dir": None,
    "--dry-run": False,
}
"""`phantora sweep --help`'s options (docs/sweep.md)."""


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def options(actions: list[argparse.Action]) -> dict[str, object]:
    """Each option's flags (space-separated) and its default."""
    return {" ".join(a.option_strings): a.default for a in actions if a.option_strings}


def test_the_commands_are_frozen():
    assert list(subcommands()) == FROZEN_COMMANDS


def test_phantora_run_flags_and_defaults_are_frozen():
    assert options(subcommands()["run"]._actions) == FROZEN_RUN


def test_phantora_profile_flags_and_defaults_are_frozen():
    assert options(subcommands()["profile"]._actions) == FROZEN_PROFILE


def test_every_simulating_command_takes_the_same_phantora_options():
    torchrun = options(subcommands()["torchrun"]._actions)
    assert {flag: torchrun[flag] for flag in PHANTORA_OPTIONS} == PHANTORA_OPTIONS
    _, framework_actions = framework_parser(DEEPSPEED)
    assert options(framework_actions) == {**PHANTORA_OPTIONS, "-h --help": argparse.SUPPRESS}


def test_phantora_sweep_flags_and_defaults_are_frozen():
    assert options(sweep_parser()._actions) == FROZEN_SWEEP
