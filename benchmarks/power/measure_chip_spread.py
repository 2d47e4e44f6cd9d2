"""How much the GPUs of one machine differ in speed running the same work at the same time (chip-to-chip spread).

    python3 -m benchmarks.power.measure_chip_spread --out DIR [--seconds 15] [--rounds 2]

Run on the GPU machine (torch and nvidia-smi only). One worker process per GPU; all of them start each phase at
the same wall-clock moment and run the same kernels, timed with CUDA events, for `--seconds`:

- `clocked`: bf16 GEMMs (8192 x 8192 x 8192) and flash attention (batch 4, 32 heads, 4096 x 128, forward and
  backward) back to back: tensor-core work that draws the board's power limit, as a large model's step does;
- `duty`: the same work half the time (50 ms on, 50 ms off): tensor-core kernels below the power limit;
- `memory`: adding two 256 MiB bf16 tensors back to back: bound by HBM, not by the SM clock.

Each phase runs `--rounds` times, so that a chip's place among the others can be told from noise. Writes
`DIR/chip_spread.json`: each GPU's name and UUID, and per round and phase its median time per kernel; and prints
each GPU's time over the machine's mean. Read by benchmarks/power/fit_chip_spread.py (models/chip_variation.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PHASES = ("clocked", "duty", "memory")


def gpus() -> list[dict]:
    """Every GPU's index, name and UUID, as nvidia-smi lists them."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout
    return [dict(zip(("index", "name", "uuid"), (f.strip() for f in line.split(",")))) for line in out.splitlines()]


def worker(start_at: float, seconds: float, rounds: int) -> dict:
    """This process's GPU: the median time per kernel of each phase, each round."""
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    q, k, v = (torch.randn(4, 32, 4096, 128, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    x = torch.randn(128 << 20, device=dev, dtype=torch.bfloat16)
    y = torch.randn_like(x)

    def attention() -> None:
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    kernels = {"gemm": lambda: torch.mm(a, b), "attention": attention, "add": lambda: torch.add(x, y)}
    phases = {"clocked": ("gemm", "attention"), "duty": ("gemm", "attention"), "memory": ("add",)}
    for name in kernels:  # warm-up: kernels loaded, clocks up
        for _ in range(3):
            kernels[name]()
    torch.cuda.synchronize()
    results: list[dict] = []
    at = start_at
    for _ in range(rounds):
        for phase in PHASES:
            while time.time() < at:
                time.sleep(0.001)
            times: dict[str, list[float]] = {name: [] for name in phases[phase]}
            end = at + seconds
            while time.time() < end:
                burst_end = time.time() + 0.05
                while time.time() < burst_end:
                    for name in phases[phase]:
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        kernels[name]()
                        e1.record()
                        times[name].append((e0, e1))
                    torch.cuda.synchronize()
                if phase == "duty":
                    time.sleep(0.05)
            torch.cuda.synchronize()
            # the first second settles the clock: left out
            skip = {n: len(t) // max(1, round(seconds)) for n, t in times.items()}
            results.append({"phase": phase, "ms": {n: statistics.median(e0.elapsed_time(e1) for e0, e1 in t[skip[n]:])
                                                   for n, t in times.items()},
                            "kernels": {n: len(t) - skip[n] for n, t in times.items()}})
            at = end + 2.0
    return {"rounds": results}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write chip_spread.json here")
    p.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--worker", type=float, help=argparse.SUPPRESS)  # the shared start time, in a worker
    a = p.parse_args()
    if a.worker is not None:
        print(json.dumps(worker(a.worker, a.seconds, a.rounds)))
        return
    devices = gpus()
    start_at = time.time() + 30  # every worker imported torch and warmed up by then
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.power.measure_chip_spread", "--worker", str(start_at),
                               "--seconds", str(a.seconds), "--rounds", str(a.rounds)],
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": d["index"]}, stdout=subprocess.PIPE, text=True)
             for d in devices]
    for d, proc in zip(devices, procs):
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"GPU {d['index']}: worker failed ({proc.returncode})")
        d.update(json.loads(out))
    for r, entries in enumerate(zip(*(d["rounds"] for d in devices))):
        phase = entries[0]["phase"]
        for name in entries[0]["ms"]:
            ms = [e["ms"][name] for e in entries]
            mean = statistics.mean(ms)
            print(f"round {r // len(PHASES)} {phase:8s} {name:9s} mean {mean:8.3f} ms  per GPU over the mean: "
                  + " ".join(f"{100 * (m / mean - 1):+.2f} %" for m in ms), flush=True)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "chip_spread.json").write_text(json.dumps({"seconds": a.seconds, "gpus": devices}, indent=1) + "\n")


if __name__ == "__main__":
    main()
