"""A sweep's grid: the base command, the axes to vary, and the command of every point.

    base = BaseCommand.parse(["torchrun", "--gpu", "h100", "--nproc-per-node", "2", "train.py", "--batch", "8"])
    axes = [parse_program_axis("batch=8,16"), cluster_axis("gpu", "h100,h200"), parse_env_axis("NCCL_ALGO=Ring,Tree")]
    for point in grid_points(base, axes): point.phantora_args(out_dir)

Axis syntax (docs/sweep.md):
- `--grid 'training.local_batch_size=1,2,4'`: the program's option `--training.local_batch_size`; `--grid
  '--batch=2,4'` and `--grid '-b=2,4'` name the option as written. Where the base command gives the option
  (`--batch 8` or `--batch=8`) its value is replaced, else `--batch VALUE` is appended to the program's arguments.
- `--toggle recompute` (or `--toggle=--recompute`): a switch of the program, once given and once not.
- `--gpu`, `--cluster`, `--nnodes`, `--gpus-per-node`, `--nic-gbps` with comma-separated values: Phantora's
  own options of the same name (`--nnodes`: torchrun's), replaced in or added to the base command.
- `--env 'NCCL_ALGO=Ring,Tree'`: an environment variable of every rank.
Values are separated by commas; the points are every combination, the first axis varying slowest.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from phantora.cli.main import FRAMEWORK_COMMANDS, build_parser, framework_parser, split_phantora_options


class GridError(ValueError):
    """A sweep's base command or axis that cannot be used (one line)."""


CLUSTER_AXES = {"gpu": "--gpu", "cluster": "--cluster", "nnodes": "--nnodes", "gpus-per-node": "--gpus-per-node",
                "nic-gbps": "--nic-gbps"}
"""Sweep option (without dashes) -> the option of the base command it sets."""
_EXCLUSIVE = {"--gpu": "--cluster", "--cluster": "--gpu"}
"""Setting one of these removes the other from the base command (phantora takes one of them)."""
_SIMPLE_COMMANDS = ("run", "torchrun")


@dataclass(frozen=True, slots=True)
class Axis:
    """One thing to vary. kind: "program" (an option of the program), "toggle" (a switch of the program, given
    or not), "phantora" (an option of the phantora command), "env" (an environment variable)."""

    kind: str
    name: str
    """The option as written on the command line (`--batch`), or the variable's name."""
    values: tuple[str, ...]

    @property
    def label(self) -> str:
        """The column name of this axis in the sweep's table."""
        if self.kind == "env":
            return self.name
        return self.name.lstrip("-")


def _values(text: str, what: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(","))
    if not values or any(not v for v in values):
        raise GridError(f"{what}: empty value in {text!r} (values are separated by commas)")
    if len(set(values)) != len(values):
        raise GridError(f"{what}: a value is given twice in {text!r}")
    return values


def parse_program_axis(spec: str) -> Axis:
    """`--grid NAME=V1,V2`: NAME with leading dashes is the option as written, without them `--NAME`."""
    name, sep, values = spec.partition("=")
    name = name.strip()
    if not sep or not name.lstrip("-"):
        raise GridError(f"--grid {spec!r}: expected OPTION=V1,V2,... (e.g. training.local_batch_size=1,2,4)")
    option = name if name.startswith("-") else f"--{name}"
    return Axis("program", option, _values(values, f"--grid {option}"))


def toggle_axis(flag: str) -> Axis:
    """`--toggle recompute`: the program's switch `--recompute` given (on) and not (off)."""
    flag = flag.strip()
    if not flag.lstrip("-") or "=" in flag:
        raise GridError(f"--toggle {flag!r}: expected a switch of the program, e.g. --toggle recompute")
    return Axis("toggle", flag if flag.startswith("-") else f"--{flag}", ("on", "off"))


def cluster_axis(name: str, values: str) -> Axis:
    return Axis("phantora", CLUSTER_AXES[name], _values(values, f"--{name}"))


def parse_env_axis(spec: str) -> Axis:
    name, sep, values = spec.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise GridError(f"--env {spec!r}: expected NAME=V1,V2,... with NAME an environment variable's name")
    return Axis("env", name, _values(values, f"--env {name}"))


# --- the base command ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BaseCommand:
    """A phantora command split where the program starts: `command` (run, torchrun, deepspeed, accelerate
    launch), the launcher's words (Phantora's options and the launcher's own), the program's words up to its
    script (`python -u train.py`, `-m pkg.train`), and the program's arguments, which the program axes edit."""

    command: tuple[str, ...]
    launcher: tuple[str, ...]
    program_head: tuple[str, ...]
    program_args: tuple[str, ...]

    @staticmethod
    def parse(words: Sequence[str]) -> BaseCommand:
        words = list(words)
        if words and Path(words[0]).name == "phantora":
            words = words[1:]
        if not words:
            raise GridError("no base command: phantora sweep [axes] -- phantora torchrun --gpu h100 ... train.py ARGS")
        if words[0] == "torchrun":
            pass
        elif Path(words[0]).name.startswith("python") or words[0].endswith(".py"):
            words = ["run", "--", *words]
        command = _command_words(words)
        rest = words[len(command):]
        launcher, program = _split_program(command, rest)
        head, args = _split_script(command, program)
        return BaseCommand(tuple(command), tuple(launcher), tuple(head), tuple(args))

    def words(self) -> list[str]:
        return [*self.command, *self.launcher, *self.program_head, *self.program_args]


def _command_words(words: list[str]) -> list[str]:
    for framework in FRAMEWORK_COMMANDS:
        if tuple(words[:len(framework.words)]) == framework.words:
            return list(framework.words)
    if words[0] in _SIMPLE_COMMANDS:
        return [words[0]]
    known = ", ".join(["run", "torchrun"] + [f.name for f in FRAMEWORK_COMMANDS])
    raise GridError(f"the base command must be a phantora command ({known}) or a torchrun or python command, "
                    f"got {words[0]!r}")


def _command_actions(command: list[str]) -> list[argparse.Action]:
    """The options the launcher of `command` takes before the program (for a framework command: Phantora's)."""
    for framework in FRAMEWORK_COMMANDS:
        if tuple(command) == framework.words:
            return framework_parser(framework)[1]
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(commands.choices[command[0]]._actions)


def _split_program(command: list[str], words: list[str]) -> tuple[list[str], list[str]]:
    """The launcher's words and the program's; for a framework command, the program starts at its script
    (the first existing `.py` file or `-m MODULE` after Phantora's options)."""
    launcher, rest = split_phantora_options(words, _command_actions(command))
    if command[0] in _SIMPLE_COMMANDS:
        return launcher, rest
    for i, word in enumerate(rest):
        if (word.endswith(".py") and Path(word).is_file()) or (word in ("-m", "--module") and i + 1 < len(rest)):
            return launcher + rest[:i], rest[i:]
    raise GridError(f"cannot find the program's script in the {' '.join(command)} command (a .py file that "
                    "exists, or -m MODULE)")


def _split_script(command: list[str], program: list[str]) -> tuple[list[str], list[str]]:
    """`[--] [python [flags]] SCRIPT | -m MODULE` and the arguments after it."""
    i = 0
    if i < len(program) and program[i] == "--":
        i += 1
    if i < len(program) and Path(program[i]).name.startswith("python"):
        i += 1
        while i < len(program) and program[i].startswith("-") and program[i] != "-m":
            i += 1
    if i < len(program) and program[i] in ("-m", "--module"):
        i += 1  # torchrun's -m is a switch before the module's name, python's comes with it
    if i >= len(program):
        raise GridError(f"no program in the base command: {' '.join(command + program)}")
    return program[:i + 1], program[i + 1:]


# --- editing the command ---------------------------------------------------------------------------
def with_option(words: Sequence[str], option: str, value: str | None, *, at: int | None = None) -> list[str]:
    """`words` with `option` set to `value`: its value replaced where it is given (`--x 1` or `--x=1`), else
    `option value` inserted at `at` (default: appended). value None: the option removed."""
    out = list(words)
    found = False
    i = 0
    while i < len(out):
        word = out[i]
        if word == option:
            takes_value = i + 1 < len(out) and not out[i + 1].startswith("--")
            end = i + 2 if takes_value else i + 1
            if value is None or found:
                del out[i:end]
                continue
            out[i:end] = [option, value]
            found = True
            i += 2
            continue
        if word.startswith(option + "="):
            if value is None or found:
                del out[i]
                continue
            out[i] = f"{option}={value}"
            found = True
        i += 1
    if not found and value is not None:
        position = len(out) if at is None else at
        out[position:position] = [option, value]
    return out


def with_switch(words: Sequence[str], flag: str, on: bool) -> list[str]:
    """`words` with the switch `flag` present once (appended if missing) or absent."""
    out = [w for w in words if w != flag]
    return out + [flag] if on else out


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration of the sweep: the axes' values and what they make of the base command."""

    settings: dict[str, str]
    """Axis label -> value, in axis order."""
    command: tuple[str, ...]
    launcher: tuple[str, ...]
    program: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The point's folder: its settings, readable; long ones shortened with a hash that keeps them apart."""
        text = ",".join(f"{k}={v}" for k, v in self.settings.items()) or "base"
        safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)
        if len(safe) <= 100:
            return safe
        return f"{safe[:80]}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"

    def phantora_args(self, out_dir: Path | str) -> list[str]:
        """The phantora command line of this point (without `phantora`), writing into `out_dir`; progress off,
        since the sweep prints its own."""
        launcher = with_option(self.launcher, "--out", str(out_dir), at=0)
        launcher = [w for w in launcher if w not in ("--progress", "--no-progress")]
        return [*self.command, "--no-progress", *launcher, *self.program]


def grid_points(base: BaseCommand, axes: Sequence[Axis]) -> list[Point]:
    labels = [a.label for a in axes]
    if len(set(labels)) != len(labels):
        raise GridError(f"an axis is given twice: {', '.join(sorted({l for l in labels if labels.count(l) > 1}))}")
    if "nnodes" in labels and base.command != ("torchrun",):
        raise GridError("--nnodes is torchrun's option: the base command must be phantora torchrun")
    points = []
    for values in itertools.product(*(a.values for a in axes)):
        launcher, program, env = list(base.launcher), list(base.program_args), {}
        for axis, value in zip(axes, values):
            if axis.kind == "program":
                program = with_option(program, axis.name, value)
            elif axis.kind == "toggle":
                program = with_switch(program, axis.name, value == "on")
            elif axis.kind == "phantora":
                if axis.name in _EXCLUSIVE:
                    launcher = with_option(launcher, _EXCLUSIVE[axis.name], None)
                launcher = with_option(launcher, axis.name, value, at=0)
            else:
                env[axis.name] = value
        points.append(Point(dict(zip(labels, values)), base.command, tuple(launcher),
                            (*base.program_head, *program), env))
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise GridError("two points would share a folder (their values differ only in characters a folder name "
                        "cannot hold)")
    return points
