"""GPU clocks and power over time on the GPU machine: do long runs of GEMMs lower the clock?

Two modes (run on the GPU machine, torch and nvidia-smi only):

    python3 gpu_clocks.py sample --out F.csv -- COMMAND ...   # nvidia-smi every 20 ms while COMMAND runs
    python3 gpu_clocks.py gemm --out F.json                     # one GPU: GEMM bursts of growing length

`sample` writes nvidia-smi's CSV (timestamp, GPU index, SM clock MHz, memory clock MHz, power W,
temperature C, active clock-event reasons) for every GPU while the command runs; the command's own
output passes through. `gemm` runs bf16 GEMMs (8192^3) back to back for 0.1-3 s after an idle second
each, timing every 20th with CUDA events, and samples the SM clock alongside: how fast the clock falls
under sustained tensor-core load, and how the GEMM time follows it. Then the same for a memory-bound
kernel (adding two 256 MiB bf16 tensors) and a smaller GEMM (4096 x 14336 x 4096).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from typing import IO

QUERY = "timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


def start_sampler(path: str, period_ms: int = 20) -> tuple[subprocess.Popen, IO[str]]:
    """nvidia-smi writing to `path` until terminated, and the file it writes (the caller closes it)."""
    query = QUERY
    probe = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True)
    if probe.returncode != 0:  # drivers before 535 call it clocks_throttle_reasons
        query = query.replace("clocks_event_reasons", "clocks_throttle_reasons")
    out = open(path, "w")
    out.write(query + "\n")
    out.flush()
    return subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", f"-lms={period_ms}"],
                            stdout=out, stderr=subprocess.DEVNULL), out


def sample(args: argparse.Namespace) -> int:
    sampler, out = start_sampler(args.out)
    try:
        return subprocess.call(args.command)
    finally:
        sampler.terminate()
        sampler.wait()
        out.close()


def gemm(args: argparse.Namespace) -> int:
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(128 * 2**20, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(128 * 2**20, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
    d = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16)
    kernels = {"gemm_8192": lambda: a @ b, "add_256MiB": lambda: x + y, "gemm_4096x14336x4096": lambda: c @ d}
    for run in kernels.values():
        for _ in range(5):
            run()
    torch.cuda.synchronize()
    clocks: list[tuple[float, str]] = []  # (time.time(), "SM MHz, power W")
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            r = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
            clocks.append((time.time(), r.stdout.strip()))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    bursts = []
    plan = [("gemm_8192", s) for s in (0.1, 0.3, 1.0, 3.0)] + [(k, s) for k in list(kernels)[1:] for s in (1.0, 2.0)]
    for kernel, seconds in plan:
        run = kernels[kernel]
        time.sleep(1.0)
        t_start = time.time()
        timed = []
        i = 0
        while time.time() - t_start < seconds:
            if i % 20 == 0:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                run()
                e1.record()
                timed.append((i, e0, e1))
            else:
                run()
            i += 1
            if i % 50 == 0:
                torch.cuda.synchronize()  # keep the host no more than 50 GEMMs ahead of the GPU
        torch.cuda.synchronize()
        bursts.append({"kernel": kernel, "seconds": seconds, "wall_start_s": t_start, "calls": i,
                       "ms_every_20th": [round(e0.elapsed_time(e1), 4) for _, e0, e1 in timed]})
        print(f"{kernel} burst {seconds} s: {i} calls, first {bursts[-1]['ms_every_20th'][:3]} last {bursts[-1]['ms_every_20th'][-3:]} ms",
              flush=True)
    stop.set()
    poller.join()
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "bursts": bursts, "smi": clocks}, f)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--out", required=True)
    s.add_argument("command", nargs=argparse.REMAINDER)
    g = sub.add_parser("gemm")
    g.add_argument("--out", required=True)
    args = p.parse_args()
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("gpu_clocks.py: nvidia-smi not found (run it on the GPU machine)")
    if args.mode == "sample":
        if args.command[:1] == ["--"]:
            args.command = args.command[1:]
        return sample(args)
    return gemm(args)


if __name__ == "__main__":
    sys.exit(main())
