"""The op signatures a simulation costed: counted in each rank, written as `ops.jsonl`.

Every `phantora run` / `phantora torchrun` writes `<out>/rank<N>/ops.jsonl` (each rank, at exit) and
the launcher merges them into `<out>/ops.jsonl`. `phantora profile` reads these files, rebuilds
each op's inputs and measures it on a real GPU.

File format (JSON lines): a header `{"format": "phantora-ops", "version": 1, "gpu": ..., ...}`, then
one object per distinct database signature (`models.opcall.signature`), sorted by signature:

    {"sig": ..., "op": "aten.mm.default", "args": [...], "kwargs": [[name, value], ...],
     "outputs": [...], "calls": 112, "source": "analytic", "est_ns": 41873}

`op`/`args`/`kwargs`/`outputs` are one representative call (the first seen) in the one `OpCall` encoding,
`models/opcall.py` (`encode_op`; `decode_op` reads it back). `calls` is summed over ranks;
`source` and `est_ns` are what the cost model answered ("measured" = a database entry).

Note: [Counting ops on the hot path]
`OpLog.note` costs one dict lookup keyed by the `OpCall`; the session keeps each distinct call's
`counter` with its costs (`Session.cost`), so a repeated call hashes nothing. Signatures, encodings
and grouping happen only when the log is written, once per distinct call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from phantora.models.opcall import encode_op, signature
from phantora.models.ops import KernelEstimate, OpCall

OPS_FORMAT = "phantora-ops"
OPS_VERSION = 1
OPS_FILE = "ops.jsonl"


class OpLog:
    """The distinct ops one rank costed: how often, and the estimate each got (Note [Counting ops
    on the hot path])."""

    __slots__ = ("_calls", "unhashable")

    def __init__(self) -> None:
        self._calls: dict[OpCall, list] = {}
        self.unhashable = 0
        """Calls whose arguments could not be hashed (not logged)."""

    def note(self, op: OpCall, estimate: KernelEstimate) -> None:
        counter = self.counter(op, estimate)
        if counter is None:
            self.unhashable += 1
        else:
            counter[0] += 1

    def counter(self, op: OpCall, estimate: KernelEstimate) -> list | None:
        """`op`'s [calls, first estimate], made with no calls if new, for a caller that counts calls itself;
        None if `op` cannot be hashed (the caller counts it in `unhashable`)."""
        try:
            entry = self._calls.get(op)
        except TypeError:
            return None
        if entry is None:
            entry = self._calls[op] = [0, estimate]
        return entry

    def __len__(self) -> int:
        return len(self._calls)

    def records(self) -> dict[str, dict[str, Any]]:
        """One record per signature (calls summed over the `OpCall`s that share it)."""
        out: dict[str, dict[str, Any]] = {}
        for op, (calls, estimate) in self._calls.items():
            sig = signature(op)
            rec = out.get(sig)
            if rec is None:
                out[sig] = encode_record(op, sig=sig, calls=calls, source=estimate.source,
                                         est_ns=estimate.duration_ns)
            else:
                rec["calls"] += calls
        return out


# ----------------------------------------------------------------------------- encoding


def encode_record(op: OpCall, *, sig: str | None = None, calls: int = 1, source: str = "",
                  est_ns: int = 0) -> dict[str, Any]:
    """One line of an ops file: the call's record (models/opcall.py), its signature and what the model said."""
    return {"sig": sig or signature(op), **encode_op(op), "calls": calls, "source": source, "est_ns": est_ns}


# ----------------------------------------------------------------------------- files


@dataclass(slots=True)
class OpsFile:
    """The contents of one or more merged ops files."""

    gpu: str
    records: dict[str, dict[str, Any]]
    """Signature -> record."""
    sources: list[str]


def write_ops(path: str | Path, records: dict[str, dict[str, Any]], *, gpu: str, **meta: Any) -> Path:
    """Write records (signature -> record), sorted by signature, under a versioned header."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps({"format": OPS_FORMAT, "version": OPS_VERSION, "gpu": gpu, **meta}) + "\n")
        for sig in sorted(records):
            f.write(json.dumps(records[sig], separators=(",", ":")) + "\n")
    tmp.replace(path)
    return path


def read_ops(path: str | Path) -> OpsFile:
    """Read one ops file; a wrong format or version is a ValueError naming the file."""
    path = Path(path)
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines:
        raise ValueError(f"{path}: empty ops file")
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError:
        raise ValueError(f"{path}: not a Phantora ops file (its first line is not JSON)") from None
    if not isinstance(head, dict) or head.get("format") != OPS_FORMAT:
        fmt = head.get("format") if isinstance(head, dict) else None
        raise ValueError(f"{path}: not a Phantora ops file (format {fmt!r}, expected {OPS_FORMAT!r})")
    if head.get("version") != OPS_VERSION:
        raise ValueError(f"{path}: ops file version {head.get('version')} (this Phantora reads {OPS_VERSION})")
    records: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            sig = rec["sig"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{path}:{n}: malformed op record") from None
        _add(records, sig, rec)
    return OpsFile(str(head.get("gpu", "")), records, [str(path)])


def _add(records: dict[str, dict[str, Any]], sig: str, rec: dict[str, Any]) -> None:
    old = records.get(sig)
    if old is None:
        records[sig] = dict(rec)
    else:
        old["calls"] = int(old.get("calls", 0)) + int(rec.get("calls", 0))


def merge_ops(files: Iterable[OpsFile]) -> OpsFile:
    """Union of ops files (calls summed; the first file's representative call kept). Files for
    different GPUs may be merged: signatures do not depend on the GPU; `gpu` is then the first's."""
    files = list(files)
    if not files:
        raise ValueError("no ops files to merge")
    records: dict[str, dict[str, Any]] = {}
    for f in files:
        for sig, rec in f.records.items():
            _add(records, sig, rec)
    return OpsFile(files[0].gpu, records, [s for f in files for s in f.sources])


def ops_files_in(path: str | Path) -> list[Path]:
    """The ops files a path names: the file itself, or a simulation's output folder (its merged
    `ops.jsonl`, else every `rank<N>/ops.jsonl`)."""
    path = Path(path)
    if path.is_dir():
        merged = path / OPS_FILE
        if merged.is_file():
            return [merged]
        ranks = sorted((p for p in path.glob(f"rank*/{OPS_FILE}") if p.parent.name[4:].isdigit()),
                       key=lambda p: int(p.parent.name[4:]))
        if not ranks:
            raise ValueError(f"{path}: no {OPS_FILE} in this folder (nor in its rank*/ folders)")
        return ranks
    if not path.is_file():
        raise ValueError(f"{path}: no such ops file or folder")
    return [path]


def merge_rank_ops(out_dir: str | Path, ranks: Iterable[int], *, gpu: str) -> Path | None:
    """The launcher's step: `<out>/rank<N>/ops.jsonl` of every rank -> `<out>/ops.jsonl`; None if no rank
    wrote one. A rank file that cannot be read is skipped (its rank crashed while writing)."""
    out_dir = Path(out_dir)
    files = []
    for rank in ranks:
        p = out_dir / f"rank{rank}" / OPS_FILE
        if p.is_file():
            try:
                files.append(read_ops(p))
            except (OSError, ValueError):
                continue
    if not files:
        return None
    merged = merge_ops(files)
    return write_ops(out_dir / OPS_FILE, merged.records, gpu=gpu, ranks=len(files))
