"""Host time of building a CPU tensor from Python data: what the host model's `python_element_ns` charges per
element (models/host.py Note [Tensors from Python data]).

    python -m benchmarks.host.measure_tensor_from_python            # writes $OUT/tensor_from_python.json

`torch.tensor(list)`, `torch.as_tensor(list)` and the typed constructors (`torch.LongTensor(list)`, as TorchTitan's
text dataset builds each sample) walk the Python sequence in C++ and store each element: no op runs per element, so
op interception sees one op however long the list. A data pipeline does this for every batch it tokenizes and pads.
Cases, each a list of Python numbers built once (the conversion is timed, not the list):

- `ints`: `torch.tensor(list of ints)`, 16 to 1M elements (int64);
- `floats`: `torch.tensor(list of floats)`, 1k to 256k elements (float32);
- `rows`: `torch.tensor(list of lists)`, rows of 2048 ints (a padded batch of token ids);
- `long_tensor`: `torch.LongTensor(list)` of 4097 ints (TorchTitan's sample); `ints_dtype`: `torch.tensor(list,
  dtype=torch.long)` (no type inference); `as_tensor`: `torch.as_tensor(list)`.

Each case runs ROUNDS times, each round a host-speed probe (benchmarks/common/host_probe.py) and then the median of
REPEATS calls after a warm-up, so that each time comes with the speed of the host it was taken on.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Callable

import torch

from benchmarks.common.host_probe import median_call_s, probe_apart

ROUNDS = 5
REPEATS = 7


def cases() -> list[tuple[str, int, Callable[[], object]]]:
    """(case, elements, the conversion)."""
    found = []
    for n in (16, 1 << 10, 1 << 14, 1 << 18, 1 << 20):
        ints = list(range(n))
        found.append(("ints", n, lambda data=ints: torch.tensor(data)))
    for n in (1 << 10, 1 << 14, 1 << 18):
        floats = [float(i) * 0.5 for i in range(n)]
        found.append(("floats", n, lambda data=floats: torch.tensor(data)))
    for rows in (8, 64):
        batch = [list(range(2048)) for _ in range(rows)]
        found.append(("rows", rows * 2048, lambda data=batch: torch.tensor(data)))
    sample = list(range(4097))
    found.append(("long_tensor", 4097, lambda: torch.LongTensor(sample)))
    found.append(("ints_dtype", 1 << 14, lambda data=list(range(1 << 14)): torch.tensor(data, dtype=torch.long)))
    found.append(("as_tensor", 1 << 14, lambda data=list(range(1 << 14)): torch.as_tensor(data)))
    return found


def main() -> None:
    out = os.environ.get("OUT", "/tmp")
    torch.set_num_threads(1)
    rows = []
    for round_ in range(ROUNDS):
        probe = probe_apart(f"round {round_}")
        for case, elements, call in cases():
            rows.append({"case": case, "elements": elements, "round": round_, "seconds": median_call_s(call, REPEATS),
                         "probe_us": probe.get("python_loop_us")})
    for case, elements in dict.fromkeys((r["case"], r["elements"]) for r in rows):
        picked = [r["seconds"] for r in rows if r["case"] == case and r["elements"] == elements]
        print(f"{case:>12} {elements:>8}: {statistics.median(picked) * 1e9 / elements:7.1f} ns/element "
              f"({statistics.median(picked) * 1e6:9.1f} µs)", flush=True)
    result = {"torch": torch.__version__, "cpus": len(os.sched_getaffinity(0)), "rows": rows}
    with open(os.path.join(out, "tensor_from_python.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
