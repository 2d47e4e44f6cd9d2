"""GPU clocks and power over time on the GPU machine: do long runs of GEMMs lower the clock?

Modes (run on the GPU machine, torch, nvidia-smi and the driver's NVML library only):

    python3 gpu_clocks.py sample --out F.csv -- COMMAND ...     # nvidia-smi every 20 ms while COMMAND runs
    python3 gpu_clocks.py nvml --out F.csv.gz -- COMMAND ...    # NVML every 2 ms: clock and instant power
    python3 gpu_clocks.py gemm --out F.json                     # one GPU: GEMM bursts of growing length
    python3 gpu_clocks.py duty --out F.json                     # one GPU: GEMMs on and off, mixes
    python3 gpu_clocks.py controller --out F.json               # one GPU: step-like GEMM square waves
    python3 gpu_clocks.py energy --out F.json                   # one GPU: energy per kernel at full and capped clocks
    python3 gpu_clocks.py heat --out F.json                     # one GPU: 90 s of GEMMs: power as the board warms

`sample` writes nvidia-smi's CSV (timestamp, GPU index, SM clock MHz, memory clock MHz, power W,
temperature C, active clock-event reasons) for every GPU while the command runs; the command's own
output passes through. `gemm` runs bf16 GEMMs (8192^3) back to back for 0.1-3 s after an idle second
each, timing every 20th with CUDA events, and samples the SM clock alongside: how fast the clock falls
under sustained tensor-core load, and how the GEMM time follows it. Then the same for a memory-bound
kernel (adding two 256 MiB bf16 tensors) and a smaller GEMM (4096 x 14336 x 4096).

nvidia-smi refreshes its clock every 100 ms and reports power as a one-second average, too slow to see
what a training step's phases draw. `nvml` reads NVML directly (ctypes on libnvidia-ml.so.1): every GPU's
SM clock, *instantaneous* power (field NVML_FI_DEV_POWER_INSTANT, with the time the driver took it) and
clock-event reasons, every 2 ms. `duty` runs the power cap's step and duty-cycle responses: bf16 8192^3
GEMMs continuously and on/off at several periods, a memory-bound add, GEMMs mixed with adds, and the 8B
Llama's MLP GEMM; every GEMM is timed with CUDA events. `controller` runs square waves of GEMMs with the
periods of training steps (busy 0.7 s / idle 0.3 s like the 8B FSDP2 step, 1.5 / 0.3 s like TorchTitan's
8B, 0.4 / 0.1 s, 0.85 / 0.15 s), 8 s each after an idle second: the clock controller's response to a
periodic load whose period is near its one-second window (run it under `nvml`).

`energy` reads the board's energy counter (NVML's total energy since the driver loaded, in mJ: an exact integral
where instantaneous samples alias with short duty cycles) over runs of one kernel at several duty cycles: the GEMMs
(8192^3 and the 8B Llama's MLP in bf16, 8192^3 in fp8, which the limit holds at a lower clock), causal flash attention
forward and backward, the memory-bound add, and what an 8B Llama's step runs beside them (a GQA key/value projection,
SwiGLU's activation and product, RMSNorm, over 16384 tokens), each at two duty cycles short of
the power limit, where the clock stays up, and continuously, where the limit holds it down. Average power against
busy fraction at full clock gives the energy of a kernel at full clock and the power between kernels; continuously,
what the same kernel costs at the clock the limit leaves.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import IO, Callable

from benchmarks.common.env import write_meta

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


def warm_kernels(gemms: dict[str, tuple[int, int, int]], add: str) -> dict[str, Callable[[], object]]:
    """bf16 GEMMs (name -> m, k, n) and a bf16 add of two 256 MiB tensors (named `add`), each run 5 times."""
    import torch

    def randn(*shape: int) -> "torch.Tensor":
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    kernels: dict[str, Callable[[], object]] = {}
    for name, (m, k, n) in gemms.items():
        kernels[name] = lambda a=randn(m, k), b=randn(k, n): a @ b
    kernels[add] = lambda x=randn(ADD_NUMEL), y=randn(ADD_NUMEL): x + y
    for run in kernels.values():
        for _ in range(5):
            run()
    torch.cuda.synchronize()
    return kernels


def gemm(args: argparse.Namespace) -> int:
    import torch

    kernels = warm_kernels({"gemm_8192": (8192, 8192, 8192), "gemm_4096x14336x4096": (4096, 14336, 4096)}, add="add_256MiB")
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
    plan = [("gemm_8192", s) for s in (0.1, 0.3, 1.0, 3.0)] + [(k, s) for k in ("add_256MiB", "gemm_4096x14336x4096")
                                                                for s in (1.0, 2.0)]
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


NVML_CLOCK_SM = 1
NVML_FI_DEV_POWER_INSTANT = 186


class _FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


def _field_value(f: _FieldValue) -> float:
    """The union's value by its type (NVML value types: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 signed long long)."""
    if f.valueType == 0:
        return ctypes.cast(ctypes.pointer(ctypes.c_ulonglong(f.value)), ctypes.POINTER(ctypes.c_double)).contents.value
    if f.valueType == 1:
        return float(f.value & 0xFFFFFFFF)
    return float(f.value)


def nvml_sample(args: argparse.Namespace) -> int:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        raise SystemExit("gpu_clocks.py: nvmlInit failed")
    count = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    handles = []
    for i in range(count.value):
        h = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        handles.append(h)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    clock, reasons, field = ctypes.c_uint(), ctypes.c_ulonglong(), _FieldValue()
    child = subprocess.Popen(args.command)
    period = args.period_ms / 1000
    with gzip.open(args.out, "wt") as out:
        out.write("t_s,gpu,sm_mhz,power_w,power_t_s,reasons\n")
        next_t = time.time()
        while child.poll() is None:
            for i, h in enumerate(handles):
                t = time.time()
                nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM, ctypes.byref(clock))
                field.fieldId, field.scopeId = NVML_FI_DEV_POWER_INSTANT, 0
                nvml.nvmlDeviceGetFieldValues(h, 1, ctypes.byref(field))
                power = _field_value(field) / 1000 if field.nvmlReturn == 0 else -1.0
                reasons_fn(h, ctypes.byref(reasons))
                out.write(f"{t:.4f},{i},{clock.value},{power:.1f},{field.timestamp / 1e6:.4f},{reasons.value:#x}\n")
            next_t += period
            time.sleep(max(0.0, next_t - time.time()))
    nvml.nvmlShutdown()
    return child.returncode


def timed_chunk(kernels: dict[str, Callable[[], object]], names: list[str]) -> list[tuple[float, str, float]]:
    """Run the kernels `names` back to back, each timed with CUDA events, then synchronize: (wall time at
    the synchronize, kernel, ms) for each."""
    import torch

    events = []
    for k in names:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        kernels[k]()
        e1.record()
        events.append((k, e0, e1))
    torch.cuda.synchronize()
    now = round(time.time(), 4)
    return [(now, k, round(e0.elapsed_time(e1), 4)) for k, e0, e1 in events]


def duty(args: argparse.Namespace) -> int:
    """GEMMs continuously, on/off at several periods, a memory-bound add, and mixes (GPU 0)."""
    import torch

    kernels = warm_kernels({"gemm": (8192, 8192, 8192), "mlp8b": (8192, 4096, 14336)}, add="add")
    # (name, kernel pattern per chunk, chunk count per busy period, idle ms after each busy period, seconds)
    plan = [("gemm continuous", ["gemm"], 20, 0, 2.0),
            ("gemm on 5 / off 5 ms", ["gemm"], 4, 5, 2.0), ("gemm on 20 / off 20 ms", ["gemm"], 14, 20, 2.0),
            ("gemm on 50 / off 50 ms", ["gemm"], 36, 50, 2.0), ("gemm on 200 / off 200 ms", ["gemm"], 140, 200, 3.0),
            ("gemm on 60 / off 20 ms", ["gemm"], 42, 20, 2.0), ("gemm on 20 / off 60 ms", ["gemm"], 14, 60, 2.0),
            ("add continuous", ["add"], 40, 0, 1.5),
            ("gemm + 7 add", ["gemm"] + ["add"] * 7, 4, 0, 2.0), ("gemm + 2 add", ["gemm", "add", "add"], 8, 0, 2.0),
            ("mlp8b continuous", ["mlp8b"], 20, 0, 2.0)]
    runs = []
    for name, pattern, repeats, idle_ms, seconds in plan:
        time.sleep(1.0)
        t_start = time.time()
        timed: list[tuple[float, str, float]] = []  # (wall time at the chunk's sync, kernel, ms)
        while time.time() - t_start < seconds:
            timed += timed_chunk(kernels, pattern * repeats)
            if idle_ms:
                time.sleep(idle_ms / 1000)
        runs.append({"name": name, "pattern": pattern, "idle_ms": idle_ms, "wall_start_s": t_start,
                     "wall_end_s": time.time(), "kernels": timed})
        gemms = [ms for _, k, ms in timed if k != "add"]
        print(f"{name}: {len(timed)} kernels, GEMM ms median {sorted(gemms)[len(gemms) // 2] if gemms else '-'}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": runs}, f)
    return 0


def controller(args: argparse.Namespace) -> int:
    """Step-like square waves of GEMMs (GPU 0): busy for on_ms, idle for off_ms, for `seconds`."""
    import torch

    kernels = warm_kernels({"gemm": (8192, 8192, 8192)}, add="add")
    plan = [(700, 300, 8.0), (1500, 300, 8.0), (400, 100, 6.0), (850, 150, 8.0)]
    runs = []
    for on_ms, off_ms, seconds in plan:
        time.sleep(1.0)
        t_start = time.time()
        timed: list[tuple[float, float]] = []  # (wall time at the chunk's sync, GEMM ms)
        while time.time() - t_start < seconds:
            busy_start = time.time()
            while (time.time() - busy_start) * 1000 < on_ms:
                timed += [(now, ms) for now, _, ms in timed_chunk(kernels, ["gemm"] * 10)]
            time.sleep(off_ms / 1000)
        runs.append({"on_ms": on_ms, "off_ms": off_ms, "wall_start_s": t_start, "wall_end_s": time.time(),
                     "gemms": timed})
        ms = sorted(g for _, g in timed)
        print(f"on {on_ms} / off {off_ms} ms: {len(timed)} GEMMs, median {ms[len(ms) // 2]:.3f} ms", flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": runs}, f)
    return 0


ENERGY_GEMMS = {"gemm": (8192, 8192, 8192), "mlp8b": (8192, 4096, 14336), "kvproj": (16384, 4096, 1024)}
"""`energy`'s bf16 GEMMs, name -> (m, k, n): 8192^3, the 8B Llama's MLP, a GQA key/value projection over 16384
tokens; `fp8gemm` is 8192^3 in fp8 (bf16 result)."""
ATTENTION_SHAPE = (1, 32, 8192, 128)
"""`energy`'s causal flash attention, forward and backward: batch, heads, sequence, head dim (bf16)."""
SWIGLU_SHAPE = (16384, 14336)
"""`energy`'s SwiGLU activation and product (SiLU of one tensor times another) and, of (16384, 4096), RMSNorm."""
ADD_NUMEL = 128 * 2**20
"""Elements of each bf16 operand of the add (256 MiB), in every mode."""


def kernel_work(kernel: str) -> tuple[float, float]:
    """(FLOPs, device-memory bytes read and written) of one call of an `energy` kernel."""
    b, h, seq, d = ATTENTION_SHAPE
    tokens, hidden, _ = ENERGY_GEMMS["kvproj"]
    if kernel in ENERGY_GEMMS:
        m, k, n = ENERGY_GEMMS[kernel]
        return 2 * m * k * n, 2 * (m * k + k * n + m * n)
    if kernel == "fp8gemm":
        return 2 * 8192**3, 8192 * 8192 * (1 + 1 + 2)
    if kernel == "attention":
        return 4 * b * h * seq * seq * d / 2, 4 * b * h * seq * d * 2  # q, k, v read, out written
    if kernel == "attention_bwd":  # 2.5x the forward's FLOPs; q, k, v, out, its gradient read, 3 gradients written
        return 2.5 * 4 * b * h * seq * seq * d / 2, 9 * b * h * seq * d * 2
    if kernel == "swiglu":  # SiLU reads and writes, the product reads two and writes one
        return 0.0, 5 * SWIGLU_SHAPE[0] * SWIGLU_SHAPE[1] * 2
    if kernel == "rmsnorm":
        return 0.0, 2 * tokens * hidden * 2
    if kernel == "add":
        return 0.0, 3 * ADD_NUMEL * 2
    raise ValueError(f"unknown energy kernel {kernel!r}")


class Board:
    """GPU 0 through NVML: its energy counter, SM clock and temperature."""

    def __init__(self) -> None:
        self._nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if self._nvml.nvmlInit_v2() != 0:
            raise SystemExit("gpu_clocks.py: nvmlInit failed")
        self._handle = ctypes.c_void_p()
        self._nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self._handle))

    def millijoules(self) -> int:
        value = ctypes.c_ulonglong()
        if self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(value)) != 0:
            raise SystemExit("gpu_clocks.py: NVML has no energy counter on this GPU")
        return value.value

    def sm_mhz(self) -> int:
        clock = ctypes.c_uint()
        self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(clock))
        return clock.value

    def celsius(self) -> int:
        temperature = ctypes.c_uint()
        self._nvml.nvmlDeviceGetTemperature(self._handle, 0, ctypes.byref(temperature))  # NVML_TEMPERATURE_GPU
        return temperature.value

    def close(self) -> None:
        self._nvml.nvmlShutdown()


ENERGY_PLAN = [
    # (kernel, kernels per busy period, idle ms after each busy period (0: continuous), seconds)
    ("gemm", 4, 22, 4.0), ("gemm", 4, 7, 4.0), ("gemm", 20, 0, 4.0),
    ("mlp8b", 4, 16, 4.0), ("mlp8b", 4, 5, 4.0), ("mlp8b", 20, 0, 4.0),
    ("attention", 4, 12, 4.0), ("attention", 4, 4, 4.0), ("attention", 20, 0, 4.0),
    ("add", 20, 12, 3.0), ("add", 20, 3, 3.0), ("add", 40, 0, 3.0),
    ("fp8gemm", 8, 30, 4.0), ("fp8gemm", 8, 8, 4.0), ("fp8gemm", 40, 0, 4.0),
    ("attention_bwd", 2, 12, 4.0), ("attention_bwd", 2, 4, 4.0), ("attention_bwd", 10, 0, 4.0),
    ("kvproj", 8, 10, 3.0), ("kvproj", 8, 3, 3.0), ("kvproj", 40, 0, 3.0),
    ("swiglu", 10, 12, 3.0), ("swiglu", 10, 3, 3.0), ("swiglu", 40, 0, 3.0),
    ("rmsnorm", 20, 12, 3.0), ("rmsnorm", 20, 3, 3.0), ("rmsnorm", 80, 0, 3.0),
]
"""One GPU's energy runs: two duty cycles below the power limit and one continuous run per kernel."""


def energy(args: argparse.Namespace) -> int:
    """Energy per kernel from the board's energy counter (GPU 0), idle first: see the module docstring."""
    import torch

    board = Board()
    kernels = warm_kernels({name: ENERGY_GEMMS[name] for name in ("gemm", "mlp8b")}, add="add")
    q, k, v = (torch.randn(*ATTENTION_SHAPE, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    kernels["attention"] = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    # an fp8 GEMM draws more power than a bf16 one: the limit holds it at a lower clock (a deeper stretch)
    a8 = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(8192, 8192, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    kernels["fp8gemm"] = lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
    # what a training step runs beside them: attention's backward, a GQA key/value projection (16384 x 4096 x 1024),
    # SwiGLU's activation and product and RMSNorm over 16384 tokens of an 8B Llama (bf16)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
    grad = torch.randn_like(out)
    kernels["attention_bwd"] = lambda: torch.autograd.grad(out, (qg, kg, vg), grad, retain_graph=True)
    tokens, hidden, kv = ENERGY_GEMMS["kvproj"]
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    w_kv = torch.randn(hidden, kv, device="cuda", dtype=torch.bfloat16)
    w_norm = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
    gate, up = (torch.randn(*SWIGLU_SHAPE, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kernels["kvproj"] = lambda: x @ w_kv
    kernels["swiglu"] = lambda: torch.nn.functional.silu(gate) * up
    kernels["rmsnorm"] = lambda: torch.nn.functional.rms_norm(x, (hidden,), w_norm)
    timed_chunk(kernels, ["attention", "fp8gemm", "attention_bwd", "kvproj", "swiglu", "rmsnorm"] * 3)
    time.sleep(2.0)
    t0, e0 = time.time(), board.millijoules()
    time.sleep(3.0)
    runs = [{"kernel": None, "idle_ms": None, "seconds": time.time() - t0, "mj": board.millijoules() - e0, "kernels": []}]
    for name, repeats, idle_ms, seconds in ENERGY_PLAN:
        time.sleep(1.5)
        timed: list[tuple[float, str, float]] = []
        t0, e0 = time.time(), board.millijoules()
        while time.time() - t0 < seconds:
            timed += timed_chunk(kernels, [name] * repeats)
            if idle_ms:
                time.sleep(idle_ms / 1000)
        mhz = board.sm_mhz()
        elapsed, used = time.time() - t0, board.millijoules() - e0
        runs.append({"kernel": name, "idle_ms": idle_ms, "seconds": elapsed, "mj": used, "sm_mhz_at_end": mhz,
                     "kernels": [ms for _, _, ms in timed]})
        busy = sum(ms for _, _, ms in timed) / 1e3 / elapsed
        ms = sorted(ms for _, _, ms in timed)
        print(f"{name} idle {idle_ms} ms: {used / 1e3 / elapsed:.0f} W, busy {busy:.2f}, median {ms[len(ms) // 2]:.3f} ms, "
              f"{mhz} MHz", flush=True)
    board.close()
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": runs}, f)
    return 0


def heat(args: argparse.Namespace) -> int:
    """GEMMs back to back for `HEAT_S` seconds, then the board idle (GPU 0): every 2 s of load and every second after,
    the board's power from its energy counter, its temperature and SM clock, and the GEMM's median time: how a board
    warming up under sustained load draws more at the same clock, and what it draws idle while still hot."""
    import torch

    board = Board()

    def state() -> tuple[float, int, int]:
        return board.millijoules() / 1e3, board.sm_mhz(), board.celsius()

    kernels = warm_kernels({"gemm": ENERGY_GEMMS["gemm"]}, add="add")
    samples = []
    time.sleep(3.0)
    for phase, seconds, period in (("idle", 4.0, 1.0), ("load", HEAT_S, 2.0), ("idle", 12.0, 1.0)):
        t_end = time.time() + seconds
        while time.time() < t_end:
            t0, (j0, _, _) = time.time(), state()
            gemms: list[float] = []
            while time.time() - t0 < period:
                if phase == "load":
                    gemms += [ms for _, _, ms in timed_chunk(kernels, ["gemm"] * 20)]
                else:
                    time.sleep(0.05)
            j1, mhz, celsius = state()
            row = {"phase": phase, "t_s": round(t0, 3), "seconds": time.time() - t0, "watts": (j1 - j0) / (time.time() - t0),
                   "sm_mhz": mhz, "celsius": celsius, "gemms": len(gemms),
                   "gemm_ms": sorted(gemms)[len(gemms) // 2] if gemms else None}
            samples.append(row)
            print(f"{phase} {row['watts']:.0f} W {mhz} MHz {celsius} C gemm {row['gemm_ms']}", flush=True)
    board.close()
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "samples": samples}, f)
    return 0


HEAT_S = 90.0
"""Seconds of sustained GEMMs in `heat`: long enough for the board's temperature to settle."""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--out", required=True)
    s.add_argument("command", nargs=argparse.REMAINDER)
    n = sub.add_parser("nvml")
    n.add_argument("--out", required=True)
    n.add_argument("--period-ms", type=float, default=2.0)
    n.add_argument("command", nargs=argparse.REMAINDER)
    for mode in ("gemm", "duty", "controller", "energy", "heat"):
        sub.add_parser(mode).add_argument("--out", required=True)
    args = p.parse_args()
    write_meta(os.path.dirname(os.path.abspath(args.out)), __file__)
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("gpu_clocks.py: nvidia-smi not found (run it on the GPU machine)")
    if args.mode in ("sample", "nvml") and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return {"sample": sample, "nvml": nvml_sample, "gemm": gemm, "duty": duty, "controller": controller,
            "energy": energy, "heat": heat}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
