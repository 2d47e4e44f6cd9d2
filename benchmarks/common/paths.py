"""Where measurements and fitted constants live, for every script under benchmarks/.

Measurements: data/<gpu>/<subject>/<what>/ (data/README.md). Fitted constants and the kernel tables the
models load: src/phantora/specs/<gpu>/ (benchmarks/common/fitted.py writes the constants).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data"
BENCHMARKS = REPO / "benchmarks"
SPECS = REPO / "src" / "phantora" / "specs"
SUBJECTS = ("kernels", "collectives", "host", "power", "memory", "e2e")
"""The model inputs a measurement can calibrate or check; a new subject comes with its model."""


def data_dir(gpu: str, subject: str, *what: str) -> Path:
    """data/<gpu>/<subject>/<what...>: where one measurement of `subject` on `gpu` lives."""
    if subject not in SUBJECTS:
        raise ValueError(f"unknown subject {subject!r}: one of {', '.join(SUBJECTS)}")
    return DATA.joinpath(gpu, subject, *what)


def specs_dir(gpu: str) -> Path:
    """src/phantora/specs/<gpu>/: the data files of one GPU's profile that fits write."""
    return SPECS / gpu


def relative(path: Path) -> str:
    """`path` from the repository root, as scripts cite it in what they write."""
    return str(Path(path).resolve().relative_to(REPO))
