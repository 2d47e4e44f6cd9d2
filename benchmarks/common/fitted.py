"""Write fitted constants where the models load them: src/phantora/specs/<gpu>/<model>.json.

One file per model and GPU, shaped

    {"model": "host", "gpu": "h200",
     "constants": {"<dataclass field name>": value, ...},
     "sources": {"<dataclass field name>": "<fit script> on <data/<gpu>/<subject>/<what> path(s)>", ...}}

with values in the dataclass's own units. Several fits share one file (the host model has five), so a fit
replaces only the fields it fits and leaves the others as they are. Keys are sorted and the indent is 1, so a
refit that changes nothing leaves the file byte for byte the same and a diff shows only what moved.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common.paths import SPECS, relative

MODELS = ("host", "host_contention", "python_prices", "power", "sharing", "nccl", "chip_variation")
"""The models whose fitted constants live in these files (the kernel tables have their own formats)."""


def fitted_path(gpu: str, model: str, specs_root: Path = SPECS) -> Path:
    """src/phantora/specs/<gpu>/<model>.json (under `specs_root`, for a dry run into a copy)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: one of {', '.join(MODELS)}")
    return Path(specs_root) / gpu / f"{model}.json"


def read_fitted(gpu: str, model: str, specs_root: Path = SPECS) -> dict[str, Any]:
    """The file's content, or an empty one of the right shape when no fit has written it yet."""
    path = fitted_path(gpu, model, specs_root)
    if not path.exists():
        return {"model": model, "gpu": gpu, "constants": {}, "sources": {}}
    content = json.loads(path.read_text())
    if content.get("model") != model or content.get("gpu") != gpu:
        raise ValueError(f"{path} holds model {content.get('model')!r} of gpu {content.get('gpu')!r}")
    return content


def update_fitted(gpu: str, model: str, constants: dict[str, Any], sources: dict[str, str],
                  *, specs_root: Path = SPECS) -> Path:
    """Replace `constants` (and their `sources`) in the model's file, keep every other field, write it back.

    Every fitted constant must say where it came from: a key of `constants` without one in `sources` is refused,
    as is a source for a constant that is not being written.
    """
    if set(constants) != set(sources):
        missing = sorted(set(constants) ^ set(sources))
        raise ValueError(f"constants and sources must name the same fields; unmatched: {', '.join(missing)}")
    content = read_fitted(gpu, model, specs_root)
    content["constants"].update(constants)
    content["sources"].update(sources)
    path = fitted_path(gpu, model, specs_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
    return path


def write_fit(script: str, data: Path, gpu: str, model: str, constants: dict[str, Any], *, dry_run: bool,
              specs_root: Path = SPECS) -> None:
    """The end of a fit's `main`: unless `dry_run`, write `constants` with `script` on `data` as every one's source,
    and say where."""
    if dry_run:
        return
    source = f"{script} on {relative(data)}"
    print(f"wrote {update_fitted(gpu, model, constants, {k: source for k in constants}, specs_root=specs_root)}")


def fit_parser(doc: str, data: Path) -> argparse.ArgumentParser:
    """A fit's command line: `--data` (default `data`), `--specs` (a copy of src/phantora/specs to write into) and
    `--dry-run`; `doc`'s first line describes it."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--data", type=Path, default=data)
    p.add_argument("--specs", type=Path, default=SPECS, help="write into this copy of src/phantora/specs")
    p.add_argument("--dry-run", action="store_true", help="print, write nothing")
    return p
