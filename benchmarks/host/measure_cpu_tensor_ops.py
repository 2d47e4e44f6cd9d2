"""Host time of tensor ops on CPU tensors, by the bytes they move: what the host model's `cpu_bytes_per_s` and
`pin_bytes_per_s` charge (models/host.py).

    python -m benchmarks.host.measure_cpu_tensor_ops            # writes $OUT/cpu_tensor_ops.json

A data pipeline builds each batch on the host: a DataLoader's collate stacks the samples (`torch.stack`), and with
`pin_memory=True` copies the batch into page-locked memory before `.to("cuda", non_blocking=True)`. Megatron-core's
GPT datasets give every sample a sequence x sequence attention mask, 4 MiB at 2048 tokens, so each micro-batch moves
tens of MiB on the host. The cases, each with a freshly allocated output as a pipeline's batches have (a large
allocation is a fresh mapping: its pages fault in on first touch):

- `clone`, `stack` (of 2 and of 8 samples), `cat` of 2: a copy into a new tensor;
- `ones_tril`: a factory and an op on its result (`torch.ones(n, n, dtype=bool).tril()`, a causal mask);
- `pin_memory`: a copy into page-locked memory from PyTorch's caching host allocator (warm: its blocks are reused).

Sizes from 64 KiB to 64 MiB per output; 1 intra-op thread (what torchrun gives each rank: OMP_NUM_THREADS=1) and
the process's default. Each case: warm-up, then the median of REPEATS timed calls. A host-speed probe
(benchmarks/common/host_probe.py) runs before and after, to bring the times to the reference host.
"""

from __future__ import annotations

import json
import os
from typing import Callable

import torch

from benchmarks.common.host_probe import median_call_s, probe_apart

REPEATS = 15
WARMUP = 3
SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def cases(nbytes: int) -> dict[str, tuple[Callable[[], object], int, int]]:
    """name -> (call, bytes read, bytes written) for outputs of `nbytes`."""
    half = torch.ones(nbytes // 2, dtype=torch.uint8)
    eighth = [torch.ones(nbytes // 8, dtype=torch.uint8) for _ in range(8)]
    whole = torch.ones(nbytes, dtype=torch.uint8)
    side = int((nbytes) ** 0.5)
    return {
        "clone": (whole.clone, nbytes, nbytes),
        "stack2": (lambda: torch.stack([half, half]), nbytes, nbytes),
        "stack8": (lambda: torch.stack(eighth), nbytes, nbytes),
        "cat2": (lambda: torch.cat([half, half]), nbytes, nbytes),
        "ones_tril": (lambda: torch.ones(side, side, dtype=torch.bool).tril(), side * side, 2 * side * side),
        **({"pin_memory": (whole.pin_memory, nbytes, nbytes)} if torch.cuda.is_available() else {}),
    }


def measure(threads: int) -> list[dict]:
    torch.set_num_threads(threads)
    rows = []
    for nbytes in SIZES:
        for name, (call, read, written) in cases(nbytes).items():
            seconds = median_call_s(call, REPEATS, WARMUP)
            rows.append({"op": name, "threads": threads, "bytes_read": read, "bytes_written": written,
                         "seconds": seconds})
            print(f"{name:>10} {threads:>3} threads {written / 2**20:8.2f} MiB {seconds * 1e6:10.1f} us "
                  f"{(read + written) / seconds / 1e9:6.2f} GB/s", flush=True)
    return rows


def main() -> None:
    out = os.environ.get("OUT", "/tmp")
    default_threads = torch.get_num_threads()
    before = probe_apart("before")
    rows = measure(1) + measure(default_threads)
    after = probe_apart("after")
    result = {"torch": torch.__version__, "cpus": len(os.sched_getaffinity(0)), "default_threads": default_threads,
              "probes": [before, after], "rows": rows}
    with open(os.path.join(out, "cpu_tensor_ops.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
