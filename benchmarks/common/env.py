"""What a measurement ran on, written beside it as meta.json (data/README.md gives the schema).

    python -m benchmarks.common.env DIR --script benchmarks/host/measure_calls.py --argv "..." [--lease ID]

Measuring scripts call `write_meta(out_dir, ...)` themselves; measure.sh calls this module for the folders a
shell command fills. Versions come from torch (when it imports), nvidia-smi (when present) and git.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common.paths import REPO

NCCL_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_", "CUDA_", "PHANTORA_BENCH_")
"""Environment variables that change what a measurement measures."""


def _run(words: list[str]) -> str | None:
    if shutil.which(words[0]) is None:
        return None
    done = subprocess.run(words, capture_output=True, text=True, cwd=REPO, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit() -> str:
    """The checked-out commit, with "+dirty" when the tree has changes; "unknown" outside a git checkout."""
    commit = _run(["git", "rev-parse", "HEAD"])
    if commit is None:
        return "unknown"
    return commit + ("+dirty" if _run(["git", "status", "--porcelain", "--untracked-files=no"]) else "")


def torch_versions() -> dict[str, str]:
    """torch, CUDA, cuDNN and NCCL as torch reports them; "unknown" for each when torch does not import."""
    try:
        import torch
    except ImportError:
        return {"torch": "unknown", "cuda": "unknown", "cudnn": "unknown", "nccl": "unknown"}
    nccl = "unknown"
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"torch": torch.__version__, "cuda": torch.version.cuda or "none", "cudnn": str(cudnn or "none"),
            "nccl": nccl}


def gpus() -> list[dict[str, str]]:
    """Each GPU's name, driver, power limit and maximum SM clock, from nvidia-smi; empty without one."""
    fields = ("name", "driver_version", "power.limit", "clocks.max.sm", "memory.total")
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"])
    if not out:
        return []
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.splitlines()]


def cpu_model() -> str:
    """This machine's CPU, as /proc/cpuinfo names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """The host: its name, CPU count, Python and GPUs."""
    return {"hostname": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(), "gpus": gpus()}


def meta(script: str, argv: list[str], lease: str | None = None, **extra: Any) -> dict[str, Any]:
    """The meta.json content of a measurement taken now by `script` with `argv`."""
    return {"script": script, "argv": list(argv), "commit": git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "lease": lease or os.environ.get("PHANTORA_LEASE", "unknown"), "versions": torch_versions(),
            "machine": machine(),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(NCCL_ENV_PREFIXES)}, **extra}


def write_meta(out_dir: str | Path, script: str, argv: list[str] | None = None, lease: str | None = None,
               **extra: Any) -> Path:
    """Write out_dir/meta.json for a measurement `script` (a path; __file__ is fine) is about to take there."""
    path = Path(out_dir) / "meta.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if Path(script).is_absolute() and REPO in Path(script).resolve().parents:
        script = str(Path(script).resolve().relative_to(REPO))
    content = meta(script, sys.argv[1:] if argv is None else argv, lease, **extra)
    path.write_text(json.dumps(content, indent=1) + "\n")
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the measurement's folder")
    p.add_argument("--script", required=True, help="what took it, from the repository root")
    p.add_argument("--argv", default="", help="its arguments, one string")
    p.add_argument("--lease", help="the machine lease (default: $PHANTORA_LEASE)")
    a = p.parse_args()
    print(write_meta(a.out, a.script, a.argv.split(), a.lease))


if __name__ == "__main__":
    main()
