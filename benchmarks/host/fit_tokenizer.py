"""Fit the host model's cost of tokenizing text (models/host.py Note [Tokenizing on the host]: `tokenize_char_ns`,
`tokenize_token_ns`) to data/h200/host/tokenizer/ (benchmarks/host/measure_tokenizer.py).

`tokenizers.Tokenizer.encode` of one document: time = chars x `tokenize_char_ns` (normalizing, the byte-level
pre-tokenizer's regex and byte mapping, per character) + tokens x `tokenize_token_ns` (the model's word lookups and
merges, and the encoding's ids, offsets and masks, per token it returns), by least squares on relative error over
the documents of both measured tokenizers (one about a token per character, one about 4.5 characters per token):
two tokenizers pin the two terms. Texts longer than the documents (16k characters and more) take longer per
character than this (the fit prints them); the fit leaves them out.

Each document's first `encode` is fitted (a data pipeline encodes each document once; the same text again runs
about 1.4x faster), taken to the mean host as the host model's other constants are: times the uncontended hosts'
probe over the probe taken right after it, times the mean contended host's slowdown.

    python -m benchmarks.host.fit_tokenizer [--dry-run]
"""

from __future__ import annotations

import json
import statistics

import numpy as np

from benchmarks.common.fitted import fit_parser, write_fit
from benchmarks.common.paths import data_dir
from benchmarks.host.fit_python_prices import to_mean_host

DATA = data_dir("h200", "host", "tokenizer")


def fit(rows: list[dict]) -> tuple[float, float]:
    """(seconds per character, seconds per token) of the documents' `encode` calls, on relative error."""
    docs = [r for r in rows if r["case"] == "encode"]
    seconds = np.array([r["seconds"] for r in docs])
    terms = np.array([[r["chars"], r["tokens"]] for r in docs], dtype=float) / seconds[:, None]
    per_char, per_token = np.linalg.lstsq(terms, np.ones_like(seconds), rcond=None)[0]
    return float(per_char), float(per_token)


def at_mean_host(rows: list[dict], specs) -> list[dict]:
    """The rows with their seconds taken to the mean host by the probe each took right after it."""
    return [{**r, "seconds": r["seconds"] * to_mean_host(r["probe_us"], specs)} for r in rows]


def report(rows: list[dict], per_char: float, per_token: float) -> None:
    """Each tokenizer's median and total error, the long texts' and TorchTitan's sample against the model."""
    model = lambda r: per_char * r["chars"] + per_token * r["tokens"]  # noqa: E731
    for name in sorted({r["tokenizer"] for r in rows if r["case"] == "encode"}):
        picked = [r for r in rows if r["case"] == "encode" and r["tokenizer"] == name]
        errors = [abs(model(r) / r["seconds"] - 1) for r in picked]
        total = sum(model(r) for r in picked) / sum(r["seconds"] for r in picked) - 1
        tokens_per_char = sum(r["tokens"] for r in picked) / sum(r["chars"] for r in picked)
        print(f"  {name}: {len(picked)} documents, {tokens_per_char:.2f} tokens/char, median |error| "
              f"{statistics.median(errors) * 100:.1f} %, total {total * 100:+.1f} %")
    for r in rows:
        if r["case"] == "encode_long":
            print(f"  {r['chars']:>7} chars: measured {r['seconds'] * 1e3:7.2f} ms, model {model(r) * 1e3:7.2f} ms")
        elif r["case"] == "torchtitan_sample":
            print(f"  TorchTitan's {r['tokens']}-token sample: {r['seconds'] * 1e3:.2f} ms "
                  f"({r['seconds'] * 1e9 / r['tokens']:.0f} ns a token)")


def main() -> None:
    p = fit_parser(__doc__, DATA)
    a = p.parse_args()
    rows = at_mean_host(json.loads((a.data / "tokenizer.json").read_text())["rows"], a.specs)
    per_char, per_token = fit(rows)
    report(rows, per_char, per_token)
    constants = {"tokenize_char_ns": round(per_char * 1e9), "tokenize_token_ns": round(per_token * 1e9)}
    print(f"tokenize_char_ns = {constants['tokenize_char_ns']}, tokenize_token_ns = {constants['tokenize_token_ns']} at "
          f"the mean host (the measured rows' probes {statistics.median(r['probe_us'] for r in rows):.0f} µs at the "
          f"median)")
    write_fit("benchmarks/host/fit_tokenizer.py", a.data, "h200", "host", constants, dry_run=a.dry_run,
              specs_root=a.specs)


if __name__ == "__main__":
    main()
