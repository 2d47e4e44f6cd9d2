"""Run every fit in dependency order and write what they fit where the models load it.

    python -m benchmarks.fit_all [--gpu h200] [--dry-run | --check] [--until-fixed] [--no-simulation] [--only ...]

Order: the kernel database and the analytic compute model first (everything simulated afterwards costs its kernels
with them), then the GEMM kernel table, the NCCL constants, the compute/communication sharing model, the host
model's fits (the context terms, c10d's collective calls, DTensor's dispatch, FSDP2's calls, the MoE's collectives,
contention, the library Python prices), and the power model last.
Every fit writes into a copy of src/phantora/specs/<gpu>/; fit_all then shows what changed, constant by constant,
and (without --dry-run) copies the changed files back.

The fits that simulate a workload load the shipped constants, not the copy, so a constant one of them reads moves
its result only in the next round. `--until-fixed` therefore runs rounds, each writing what moved, until a round
moves nothing (at most `--max-rounds`), and says how many rounds it took. `--check` changes nothing and exits 1 if
any constant would move: the shipped constants are then not a fixed point of the fits. `--no-simulation` leaves
out the fits that simulate (minutes each) and names them.

A fit whose measurements are absent for --gpu is skipped and named (measure them first: benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchmarks.common.fitted import MODELS
from benchmarks.common.paths import DATA, REPO, SPECS


@dataclass(frozen=True)
class Fit:
    name: str
    module: str
    data: tuple[str, ...]
    """What it reads, under data/<gpu>/."""
    args: tuple[str, ...] = ()
    gpus: tuple[str, ...] | None = ("h200",)
    """The GPUs whose data it can fit (None: any, given as --gpu); the others' are still the H200's."""
    simulates: bool = False
    """It runs workloads under Phantora (minutes), with the shipped constants."""


FITS = (
    Fit("kernels", "benchmarks.kernels.fit", ("kernels/micro", "kernels/in_step"), gpus=None),
    Fit("gemm_kernels", "benchmarks.kernels.gemm_kernels", ("kernels/gemm_kernels",), ("--write",), gpus=None),
    Fit("collectives", "benchmarks.collectives.fit", ("collectives",), gpus=None),
    Fit("sharing", "benchmarks.collectives.fit_sharing", ("e2e/step_profiles/profiles", "e2e/timelines/llama_l1b_1gpu",
                                                           "e2e/frameworks/profiles"), simulates=True),
    Fit("host_context", "benchmarks.host.fit_context", ("host/launch_bound", "host/phases", "host/leases")),
    Fit("host_collective_calls", "benchmarks.host.fit_collective_calls", ("host/python_profiles", "e2e/timelines")),
    Fit("host_cpu_tensor_ops", "benchmarks.host.fit_cpu_tensor_ops", ("host/cpu_tensor_ops", "e2e/timelines")),
    Fit("host_tokenizer", "benchmarks.host.fit_tokenizer", ("host/tokenizer", "e2e/timelines")),
    Fit("host_tensor_from_python", "benchmarks.host.fit_tensor_from_python",
        ("host/tensor_from_python", "e2e/timelines")),
    Fit("host_dtensor", "benchmarks.host.fit_dtensor", ("e2e/timelines", "host/leases"), simulates=True),
    Fit("host_fsdp", "benchmarks.host.fit_fsdp", ("host/fsdp", "host/calls/library", "host/leases"), simulates=True),
    Fit("host_fsdp1", "benchmarks.host.fit_fsdp1", ("host/fsdp1", "host/fsdp", "host/leases"), simulates=True),
    Fit("host_moe", "benchmarks.host.fit_moe", ("e2e/timelines", "host/leases"), simulates=True),
    Fit("host_contention", "benchmarks.host.fit_contention", ("e2e/timelines",)),
    Fit("host_compiled", "benchmarks.host.fit_compiled", ("host/compiled", "e2e/timelines"), ("--simulate",),
        simulates=True),
    Fit("python_prices", "benchmarks.host.fit_python_prices", ("host/python_profiles", "e2e/timelines")),
    Fit("power", "benchmarks.power.fit", ("power/nvml",), gpus=None),
    Fit("chip_variation", "benchmarks.power.fit_chip_spread", ("power/chip_spread", "e2e/step_profiles"), gpus=None),
)
"""Every fit, in the order they depend on each other."""

TABLES = ("kernels.jsonl", "calibration.json", "gemm_kernels.json")
"""The fitted tables in specs/<gpu>/ beside the constants' files (<model>.json)."""
def missing_data(fit: Fit, gpu: str) -> list[str]:
    return [f"data/{gpu}/{what}" for what in fit.data if not (DATA / gpu / what).exists()]


def run_fit(fit: Fit, gpu: str, specs: Path) -> float | None:
    """Run one fit into `specs` (a copy of the specs folders); its seconds, None if it failed. Its output goes to
    our stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO),
                                                                    os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    gpu_args = ("--gpu", gpu) if fit.gpus is None else ()
    command = [sys.executable, "-m", fit.module, *fit.args, *gpu_args, "--specs", str(specs)]
    done = subprocess.run(command, cwd=REPO, env=env, check=False, stdout=sys.stderr)
    return time.monotonic() - start if done.returncode == 0 else None


def shipped_constants(gpu: str, model: str) -> dict[str, Any]:
    """The constants the models load now: specs/<gpu>/<model>.json (none where the GPU has no such file)."""
    path = SPECS / gpu / f"{model}.json"
    return json.loads(path.read_text())["constants"] if path.exists() else {}


def shipped_table(gpu: str, name: str) -> Path | None:
    path = SPECS / gpu / name
    return path if path.exists() else None


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {"a.b.c": leaf}, so a diff names the leaf that moved."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per leaf of `new` that differs from `old` (leaves only in `old` are not the fit's)."""
    old, new = flat(old), flat(new)
    lines = []
    for key in sorted(new):
        if key not in old:
            lines.append(f"  + {key} = {new[key]!r}")
        elif not same(old[key], new[key]):
            lines.append(f"  ~ {key}: {old[key]!r} -> {new[key]!r}")
    return lines


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def database_lines(path: Path) -> dict[str, str]:
    """A kernels.jsonl's entries (the header skipped), by signature."""
    return {json.dumps(json.loads(line).get("sig", line), sort_keys=True): line
            for line in path.read_text().splitlines()[1:]}


def table_report(gpu: str, name: str, new_path: Path) -> list[str]:
    old_path = shipped_table(gpu, name)
    if old_path is None:
        return [f"  + new file ({new_path.stat().st_size} bytes)"]
    if old_path.read_bytes() == new_path.read_bytes():
        return []
    if name.endswith(".jsonl"):
        old, new = database_lines(old_path), database_lines(new_path)
        moved = sum(old[k] != new[k] for k in old.keys() & new.keys())
        return [f"  ~ {len(new)} entries: {len(new.keys() - old.keys())} new, {len(old.keys() - new.keys())} gone, "
                f"{moved} changed, {len(old.keys() & new.keys()) - moved} the same"]
    return changed(json.loads(old_path.read_text()), json.loads(new_path.read_text()))


def working_copy(gpu: str, specs: Path) -> dict[str, int]:
    """Copy the GPU's shipped specs folder into `specs` (a fit replaces only the fields it fits, so the others must
    be there) and return its files' modification times."""
    if (SPECS / gpu).is_dir():
        shutil.copytree(SPECS / gpu, specs / gpu)
    else:
        (specs / gpu).mkdir()
    return modified(specs / gpu)


def modified(folder: Path) -> dict[str, int]:
    """File name -> its modification time (ns), to tell afterwards which files the fits wrote."""
    return {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}


def report(gpu: str, specs: Path, before: dict[str, int]) -> dict[str, list[str]]:
    """File name -> what changed in it against the shipped one (only files the fits wrote: new, or modified since
    `before`)."""
    out = {}
    for name, mtime in sorted(modified(specs / gpu).items()):
        if before.get(name) == mtime:
            continue  # no fit wrote it
        path = specs / gpu / name
        if path.name in TABLES:
            out[path.name] = table_report(gpu, path.name, path)
        elif path.stem in MODELS:
            out[path.name] = changed(shipped_constants(gpu, path.stem), json.loads(path.read_text())["constants"])
    return out


def run_round(chosen: list[Fit], gpu: str, specs: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Run the chosen fits into `specs` (an empty folder, which gets a copy of the shipped constants); what changed
    per file, and the fits that failed."""
    before = working_copy(gpu, specs)
    failed: list[str] = []
    for fit in chosen:
        if fit.gpus is not None and gpu not in fit.gpus:
            print(f"{fit.name}: skipped, it fits only {', '.join(fit.gpus)} so far")
            continue
        absent = missing_data(fit, gpu)
        if absent:
            print(f"{fit.name}: skipped, no {', '.join(absent)}")
            continue
        seconds = run_fit(fit, gpu, specs)
        failed.extend([] if seconds is not None else [fit.name])
        print(f"{fit.name}: {fit.module} " + (f"({seconds:.0f} s)" if seconds is not None else "FAILED (its "
                                              "output above, on stderr)"), flush=True)
    changes = report(gpu, specs, before)
    for name, lines in changes.items():
        print(f"src/phantora/specs/{gpu}/{name}: " + ("unchanged" if not lines else f"{len(lines)} changed"))
        print("\n".join(lines)) if lines else None
    return changes, failed


def write_changes(changes: dict[str, list[str]], gpu: str, specs: Path) -> None:
    for name, lines in changes.items():
        if lines:
            (SPECS / gpu).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(specs / gpu / name, SPECS / gpu / name)
            print(f"wrote src/phantora/specs/{gpu}/{name}")


def rounds_to_fixed_point(one_round: Callable[[], bool], max_rounds: int) -> int | None:
    """Call `one_round` (True: it moved a constant) until a round moves nothing; the rounds that took, or None if
    the constants still moved after `max_rounds`."""
    for done in range(1, max_rounds + 1):
        if not one_round():
            return done
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200")
    p.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any constant would change")
    p.add_argument("--until-fixed", action="store_true", help="rerun, writing each round, until nothing moves")
    p.add_argument("--max-rounds", type=int, default=4, help="with --until-fixed: give up after this many rounds")
    p.add_argument("--no-simulation", action="store_true", help="leave out the fits that simulate workloads")
    p.add_argument("--only", default="", help=f"comma-separated fits, of: {', '.join(f.name for f in FITS)}")
    args = p.parse_args(argv)
    unknown = set(filter(None, args.only.split(","))) - {f.name for f in FITS}
    if unknown:
        p.error(f"unknown fit(s) {', '.join(sorted(unknown))}; the fits are {', '.join(f.name for f in FITS)}")
    if args.until_fixed and (args.dry_run or args.check):
        p.error("--until-fixed writes each round (the simulating fits read what the last one wrote): it cannot "
                "be a --dry-run or a --check")
    if args.max_rounds < 1:
        p.error("--max-rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = [f for f in FITS if not args.only or f.name in args.only.split(",")]
    if args.no_simulation:
        print(f"left out (they simulate): {', '.join(f.name for f in chosen if f.simulates) or 'none'}")
        chosen = [f for f in chosen if not f.simulates]
    writes = not (args.dry_run or args.check)
    outcome = {"failed": False, "moved": False}

    def one_round() -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            changes, failed = run_round(chosen, args.gpu, Path(tmp))
            if writes:
                write_changes(changes, args.gpu, Path(tmp))
        moved = any(changes.values())
        outcome["failed"] |= bool(failed)
        outcome["moved"] |= moved
        return moved and not failed

    rounds = rounds_to_fixed_point(one_round, args.max_rounds if args.until_fixed else 1)
    if outcome["failed"]:
        print("stopped: a fit failed (its output above)")
    elif args.until_fixed:
        if rounds is None:
            print(f"constants still moving after {args.max_rounds} rounds")
            return 1
        print(f"fixed point after {rounds} {'round' if rounds == 1 else 'rounds'}")
        return 0
    if args.check and outcome["moved"]:
        print("the shipped constants are not what the fits give: run python -m benchmarks.fit_all --until-fixed")
    return 1 if outcome["failed"] or (args.check and outcome["moved"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
