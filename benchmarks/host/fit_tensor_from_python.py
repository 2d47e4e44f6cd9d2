"""Fit the host model's cost of building a tensor from Python data (models/host.py Note [Tensors from Python data]:
`python_element_ns`) to data/h200/host/tensor_from_python/ (benchmarks/host/measure_tensor_from_python.py).

The constant is the pass that stores each element, which every conversion makes: the cases that name their dtype
(`torch.LongTensor(list)`, `torch.tensor(list, dtype=...)`), per element, each round's time taken to the mean host
by the probe taken just before it (as the host model's other constants are), the median over rounds and cases.
Without a dtype, `torch.tensor` first infers one in a pass of its own over the list; the fit prints those cases
against the constant (the op that interception sees does not say whether a dtype was inferred).

    python -m benchmarks.host.fit_tensor_from_python [--dry-run]
"""

from __future__ import annotations

import json
import statistics

from benchmarks.common.fitted import fit_parser, write_fit
from benchmarks.common.paths import data_dir
from benchmarks.host.fit_python_prices import to_mean_host

DATA = data_dir("h200", "host", "tensor_from_python")
STORE_ONLY = ("long_tensor", "ints_dtype")
"""Cases that name their dtype: no inference pass."""


def per_element_ns(rows: list[dict], case: str, specs) -> float:
    """Median over the rounds of a case's ns per element at the mean host."""
    return statistics.median(r["seconds"] * 1e9 / r["elements"] * to_mean_host(r["probe_us"], specs)
                             for r in rows if r["case"] == case)


def main() -> None:
    p = fit_parser(__doc__, DATA)
    a = p.parse_args()
    rows = [r for r in json.loads((a.data / "tensor_from_python.json").read_text())["rows"] if r["elements"] >= 4096]
    store = statistics.median(per_element_ns(rows, case, a.specs) for case in STORE_ONLY)
    print(f"python_element_ns = {store:.1f} at the mean host (cases {', '.join(STORE_ONLY)})")
    for case in sorted({r["case"] for r in rows} - set(STORE_ONLY)):
        ns = per_element_ns(rows, case, a.specs)
        print(f"  {case:>10}: {ns:6.1f} ns/element, {ns / store:.2f}x the constant (its dtype inferred)")
    write_fit("benchmarks/host/fit_tensor_from_python.py", a.data, "h200", "host", {"python_element_ns": round(store)},
              dry_run=a.dry_run, specs_root=a.specs)


if __name__ == "__main__":
    main()
