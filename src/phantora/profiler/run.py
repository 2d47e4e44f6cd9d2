"""`phantora profile`: measure recorded op signatures on the local GPU into a kernel database.

    config = ProfileConfig(inputs=("phantora-out/",), out="my_kernels.jsonl", measure=MeasureConfig())
    result = profile_ops(config)

Steps: read and merge the ops files (profiler/oplog.py); drop what needs no measurement (views and
other zero-cost ops) and, with `only_missing`, what a database already has; order by the time the
simulation spent in each signature (calls x estimate), heaviest first, so `limit` and `time_limit_s`
keep what matters; rebuild and time each op (profiler/rebuild.py, profiler/measure.py); merge the
new entries over `out` if it exists and write it (`KernelDatabase` format), plus a report of what was
measured and what was skipped and why.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from phantora.models.compute import DbEntry, KernelDatabase
from phantora.models.opcall import decode_op, signature
from phantora.profiler.database import check_gpu_name, gpu_key_for_device
from phantora.profiler.measure import NOT_STARTED, MeasureConfig, Measurement, Measurer
from phantora.profiler.oplog import merge_ops, ops_files_in, read_ops
from phantora.profiler.rebuild import measurable
from phantora.specs import load_profile



class ProfileError(Exception):
    """Bad input or no usable device: one line, exit code 2."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileConfig:
    """One `phantora profile` run."""

    inputs: tuple[str, ...]
    """Ops files (`ops.jsonl`) or simulation output folders."""
    out: str
    """The kernel database to write; if it exists, new entries are merged over it."""
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    gpu: str | None = None
    """Database GPU name; None: from the device's name (torch.cuda.get_device_name -> spec key)."""
    only_missing: bool = False
    """Skip signatures that `against` (default: the packaged database) or `out` already has."""
    against: tuple[str, ...] = ()
    limit: int | None = None
    """Measure at most this many signatures (the heaviest)."""
    time_limit_s: float | None = None
    """Start no new op after this many seconds."""
    report: str | None = None
    """Where to write the JSON report; None: next to `out` (`<out stem>.report.json`)."""
    progress_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("no ops files given: phantora profile OPS.jsonl --out DB.jsonl (or --script)")
        if self.limit is not None and self.limit < 1:
            raise ValueError("--limit must be at least 1")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError("--time-limit must be positive")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "against", tuple(self.against))

    @property
    def report_path(self) -> Path:
        if self.report:
            return Path(self.report)
        out = Path(self.out)
        return out.with_name((out.stem if out.suffix == ".jsonl" else out.name) + ".report.json")


@dataclass(slots=True)
class ProfileResult:
    gpu: str
    device_name: str
    measured: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    not_started: int = 0
    free: int = 0
    """Signatures that cost 0 by design (views, allocations): never measured."""
    present: int = 0
    """Signatures left out by `only_missing`."""
    database: Path | None = None
    entries: int = 0


@dataclass(frozen=True, slots=True)
class _Job:
    sig: str
    record: dict[str, Any]
    op: Any


def load_jobs(config: ProfileConfig, result: ProfileResult, exclude: set[str]) -> list[_Job]:
    """The ops to measure, heaviest first."""
    paths = [p for item in config.inputs for p in ops_files_in(item)]
    ops = merge_ops(read_ops(p) for p in paths)
    jobs = []
    for sig, rec in ops.records.items():
        try:
            op = decode_op(rec)
        except (KeyError, TypeError, ValueError) as error:
            result.skipped.append({"sig": sig, "op": rec.get("op", "?"), "reason": f"unreadable record: {error}"})
            continue
        if not measurable(op):
            result.free += 1
            continue
        key = signature(op)
        if key in exclude:
            result.present += 1
            continue
        jobs.append(_Job(key, rec, op))
    jobs.sort(key=lambda j: (-int(j.record.get("calls", 1)) * int(j.record.get("est_ns", 0)), j.sig))
    if config.limit is not None:
        result.not_started += max(0, len(jobs) - config.limit)
        jobs = jobs[:config.limit]
    return jobs


def _existing(config: ProfileConfig, gpu: str) -> KernelDatabase | None:
    path = Path(config.out)
    if not path.exists():
        return None
    db = KernelDatabase.load(path)
    if db.gpu != gpu:
        raise ProfileError(f"{path} holds {db.gpu} kernels, not {gpu}: choose another --out")
    return db


def _exclusions(config: ProfileConfig, gpu: str, existing: KernelDatabase | None) -> set[str]:
    if not config.only_missing:
        return set()
    dbs = [KernelDatabase.load(p) for p in config.against] if config.against else [load_profile(gpu).kernels.value]
    if existing is not None:
        dbs.append(existing)
    return {sig for db in dbs for sig in db.entries}


def resolve_gpu(config: ProfileConfig, device_name: str) -> str:
    if config.gpu:
        return check_gpu_name(config.gpu)
    if device_name == "cpu":
        raise ProfileError("--device cpu measures nothing a GPU database can use: name the database's GPU with --gpu")
    key = gpu_key_for_device(device_name)
    if key is None:
        raise ProfileError(f"cannot tell which GPU model {device_name!r} is; name it with --gpu (e.g. --gpu l40s)")
    return key


def profile_ops(config: ProfileConfig, *, log: TextIO | None = None) -> ProfileResult:
    """Measure the ops of `config.inputs` and write `config.out`; see the module docstring."""
    import torch

    log = log or sys.stderr
    try:
        measurer = Measurer(config.measure)
    except RuntimeError as error:
        raise ProfileError(f"{error}: phantora profile measures ops on a real GPU "
                           f"(--device {config.measure.device})") from None
    device_name = measurer.device_name()
    gpu = resolve_gpu(config, device_name)
    result = ProfileResult(gpu=gpu, device_name=device_name)
    try:
        existing = _existing(config, gpu)
        exclude = _exclusions(config, gpu, existing)
        jobs = load_jobs(config, result, exclude)
    except (OSError, ValueError) as error:
        raise ProfileError(str(error)) from None
    mc = config.measure
    say = lambda line: print(f"phantora profile: {line}", file=log, flush=True)  # noqa: E731
    say(f"{len(jobs)} op signatures to measure on {device_name} ({gpu}, {mc.device}): {mc.timer} timer, "
        f"{mc.warmup} warm-up + {mc.repeat} timed calls each"
        + (f", {'cold' if mc.cold else 'hot'} L2" if mc.timer != "cpu" else "")
        + (f"; {result.present} already in a database" if config.only_missing else "")
        + (f"; {result.free} cost nothing (views, allocations)" if result.free else ""))

    new = KernelDatabase(gpu, meta={
        "measured_on": device_name, "torch": torch.__version__, "cuda": torch.version.cuda, "tool": "phantora profile",
        "timer": mc.timer, "warmup": mc.warmup, "repeat": mc.repeat, "l2": "cold" if mc.cold else "hot",
        "date": time.strftime("%Y-%m-%d")})
    started = time.monotonic()
    deadline = started + config.time_limit_s if config.time_limit_s else None
    state = {"done": 0, "next": started + config.progress_interval_s}

    def done(i: int, m: Measurement | None, reason: str) -> None:
        job = jobs[i]
        state["done"] += 1
        if m is None:
            if reason == NOT_STARTED:
                result.not_started += 1
            else:
                result.skipped.append({"sig": job.sig, "op": job.op.name, "reason": reason})
        else:
            new.add(job.op, DbEntry(m.kernel_ns, m.n_kernels, len(m.samples_ns), mc.origin, job.op.name, m.kernels))
            result.measured.append({"sig": job.sig, "op": job.op.name, "kernel_ns": m.kernel_ns,
                                    "n_kernels": m.n_kernels, "samples_ns": list(m.samples_ns),
                                    "calls": job.record.get("calls"), "est_ns": job.record.get("est_ns"),
                                    "source": job.record.get("source")})
        now = time.monotonic()
        if now >= state["next"] and state["done"] < len(jobs):
            state["next"] = now + config.progress_interval_s
            left = (now - started) / state["done"] * (len(jobs) - state["done"])
            say(f"{state['done']}/{len(jobs)} ops ({len(result.measured)} measured, {len(result.skipped)} skipped), "
                f"{now - started:.0f} s, about {_duration(left)} left")

    stop = (lambda: time.monotonic() >= deadline) if deadline else None
    try:
        measurer.measure([j.op for j in jobs], done, stop=stop)
    finally:  # an interrupted run keeps what it measured
        result.database, result.entries = _write(config, new, existing)
        _write_report(config, result, time.monotonic() - started)
    _summarize(result, say, time.monotonic() - started)
    return result


def _write(config: ProfileConfig, new: KernelDatabase, existing: KernelDatabase | None) -> tuple[Path, int]:
    path = Path(config.out)
    db = new if existing is None else new.merge(existing)  # a re-measured signature replaces the old entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    db.save(tmp)
    tmp.replace(path)
    return path, len(db)


def _write_report(config: ProfileConfig, result: ProfileResult, elapsed_s: float) -> None:
    report = {"config": {**asdict(config), "measure": asdict(config.measure)}, "elapsed_s": round(elapsed_s, 1),
              **{k: v for k, v in asdict(result).items() if k != "database"},
              "database": str(result.database) if result.database else None}
    path = config.report_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")


def _summarize(result: ProfileResult, say, elapsed_s: float) -> None:
    say(f"measured {len(result.measured)} op signatures in {_duration(elapsed_s)}; skipped {len(result.skipped)}"
        + (f"; {result.not_started} not started (--limit / --time-limit)" if result.not_started else "")
        + f"; wrote {result.database} ({result.entries} entries, gpu {result.gpu})")
    by_reason: dict[str, list[str]] = {}
    for s in result.skipped:
        by_reason.setdefault(s["reason"], []).append(s["op"])
    for reason, ops in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        names = sorted(set(ops))
        say(f"  skipped {len(ops)} x {reason}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
