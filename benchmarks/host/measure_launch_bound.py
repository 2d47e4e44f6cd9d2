"""Host time of the launch-bound ground-truth workloads, phase by phase (issue 4's host model).

The two launch-bound accuracy configurations (`nanogpt_tiny_1gpu`, `llama_tiny_1gpu`) and variants
that take one thing away at a time (the DataLoader, autocast, fused vs foreach AdamW, fewer or more
layers), built from the very classes of `benchmarks/workloads/`. Each step runs as the workload
script runs it (`synchronize`, then the step, then `synchronize`) with a `perf_counter` mark
between phases and no synchronize inside the step: the step is host-bound, so a phase's time is
the host time it takes to issue it. Also per phase: the main thread's CPU time
(`time.thread_time`), time in Python's garbage collector, and, in one extra step under
`sys.setprofile`, how many Python and C functions were called. One more step per workload runs
under `torch.profiler` (CPU only): time inside top-level aten ops vs the rest.

Runs unchanged under `phantora run` (profiler and call counts skipped there), so the simulated
phases can be compared with the real ones:

    python -m benchmarks.host.measure_launch_bound                      # on the H200, writes $OUT/launch_bound.json
    python -m benchmarks.host.measure_launch_bound --compiled           # the torch.compile'd variants
    phantora run --gpu h200 -- python -m benchmarks.host.measure_launch_bound --out /tmp/sim.json
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib.util
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from benchmarks.common.env import write_meta

HERE = os.path.dirname(os.path.abspath(__file__))
SIMULATED = "PHANTORA_RUN_CONFIG" in os.environ
DEV = os.environ.get("PH_DEVICE", "cuda")
"""`PH_DEVICE=cpu` for a dry run of the script without a GPU."""


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", "workloads", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Marks:
    """perf_counter / thread_time marks between phases, and time spent in the garbage collector."""

    def __init__(self) -> None:
        self.gc_s = 0.0
        self.gc_n = 0
        self._gc_t0 = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_t0
            self.gc_n += 1

    def start(self) -> None:
        self.rows: list[tuple[str, float, float, float, int]] = []
        self._last = (time.perf_counter(), time.thread_time(), self.gc_s, self.gc_n)

    def mark(self, phase: str) -> None:
        now = (time.perf_counter(), time.thread_time(), self.gc_s, self.gc_n)
        self.rows.append((phase, now[0] - self._last[0], now[1] - self._last[1], now[2] - self._last[2],
                          now[3] - self._last[3]))
        self._last = (time.perf_counter(), time.thread_time(), self.gc_s, self.gc_n)


class CallCounter:
    """Python and C function calls per phase, counted with sys.setprofile (main thread only)."""

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter] = {}
        self.phase = ""

    def _profile(self, frame, event, arg) -> None:
        if event in ("call", "c_call"):
            self.counts.setdefault(self.phase, collections.Counter())[event] += 1

    def start(self) -> None:
        sys.setprofile(self._profile)

    def mark(self, phase: str) -> None:
        # calls since the previous mark were made in `phase`: move them there
        if "" in self.counts:
            self.counts[phase] = self.counts.pop("")

    def stop(self) -> None:
        sys.setprofile(None)


def compiled(model: torch.nn.Module, mode: str | None) -> torch.nn.Module:
    """`torch.compile(model, mode=mode)` as the workload scripts do, or the model itself for mode None."""
    return model if mode is None else torch.compile(model, mode=mode)


def nanogpt_setup(layers=4, d=256, heads=4, vocab=50304, block=256, batch=4, loader="workers2", fused=True,
                  compile=None):
    mod = load("nanogpt_train")
    torch.manual_seed(1337)
    model = mod.GPT(vocab, block, layers, d, heads).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=fused,
                            foreach=None if fused else True)
    x = y = None
    if loader == "none":
        x = torch.randint(0, vocab, (batch, block), device=DEV)
        y = torch.randint(0, vocab, (batch, block), device=DEV)
        batches = None
    elif loader == "pinned":  # the same pinned host batch copied every step: the copies without a DataLoader
        xb = torch.randint(0, vocab, (batch, block))
        yb = torch.randint(0, vocab, (batch, block))
        batches = itertools.repeat((xb.pin_memory(), yb.pin_memory()) if DEV == "cuda" else (xb, yb))
    else:  # workers2 (the script's), workers2_nopin, workers0
        dl = DataLoader(mod.RandomTokens(vocab, block), batch_size=batch, num_workers=0 if loader == "workers0" else 2,
                        pin_memory=loader != "workers2_nopin", shuffle=True)
        batches = iter(dl)
    params = list(model.parameters())
    model = compiled(model, compile)

    def step(m, amp: bool):
        nonlocal x, y
        if batches is not None:
            xb, yb = next(batches)
            m.mark("data")
            x, y = xb.to(DEV, non_blocking=True), yb.to(DEV, non_blocking=True)
            m.mark("h2d")
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=amp):
            loss = model(x, y)
        m.mark("fwd")
        loss.backward()
        m.mark("bwd")
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        m.mark("clip")
        opt.step()
        m.mark("opt")
        opt.zero_grad(set_to_none=True)
        m.mark("zero")
        return loss, norm

    return step, len(params)


def llama_setup(dim=512, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=1536, vocab=32000, seq=512, batch=2,
                compile=None):
    mod = load("llama_train")
    a = argparse.Namespace(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, ffn_dim=ffn_dim,
                           vocab=vocab, seq=seq, batch=batch)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = mod.Llama(a)
    model.to_empty(device=DEV)
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    n_params = len(list(model.parameters()))
    model = compiled(model, compile)

    def step(m, amp: bool):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=DEV)
        m.mark("data")
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=amp):
            logits = model(idx[:, :-1])
            m.mark("fwd")
            loss = F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten())
        m.mark("loss")
        loss.backward()
        m.mark("bwd")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        m.mark("clip")
        opt.step()
        m.mark("opt")
        opt.zero_grad(set_to_none=True)
        m.mark("zero")
        return loss, norm

    return step, n_params


VARIANTS = {
    # name: (setup, setup kwargs, autocast)
    "nano_script": (nanogpt_setup, {}, True),
    "nano_w0": (nanogpt_setup, {"loader": "workers0"}, True),
    "nano_noloader": (nanogpt_setup, {"loader": "none"}, True),
    "nano_pinned": (nanogpt_setup, {"loader": "pinned"}, True),
    "nano_w2_nopin": (nanogpt_setup, {"loader": "workers2_nopin"}, True),
    "nano_noloader_noamp": (nanogpt_setup, {"loader": "none"}, False),
    "nano_noloader_foreach": (nanogpt_setup, {"loader": "none", "fused": False}, True),
    "nano_noloader_L1": (nanogpt_setup, {"loader": "none", "layers": 1}, True),
    "nano_noloader_L12": (nanogpt_setup, {"loader": "none", "layers": 12}, True),
    "llama_script": (llama_setup, {}, True),
    "llama_noamp": (llama_setup, {}, False),
    "llama_L1": (llama_setup, {"n_layers": 1}, True),
    "llama_L12": (llama_setup, {"n_layers": 12}, True),
    # the host-bound llama of data/h200/host/phases/phases.json (the benchmark's op sequence, tiny shapes)
    "llama_phases28": (llama_setup, {"dim": 384, "n_layers": 28, "n_heads": 24, "n_kv_heads": 8, "ffn_dim": 512,
                                     "vocab": 1024, "seq": 64, "batch": 1}, True),
    # the other two of data/h200/host/phases/phases.json (not in data/h200/host/launch_bound/; kept to simulate them)
    "llama_phases16": (llama_setup, {"dim": 256, "n_layers": 16, "n_heads": 16, "n_kv_heads": 8, "ffn_dim": 512,
                                     "vocab": 1024, "seq": 64, "batch": 1}, True),
    "llama_phases8": (llama_setup, {"dim": 384, "n_layers": 8, "n_heads": 24, "n_kv_heads": 8, "ffn_dim": 512,
                                    "vocab": 1024, "seq": 64, "batch": 1}, True),
    # torch.compile'd models (data/h200/host/compiled/): one forward and one backward graph a step, whose kernel
    # count grows with the layers; "reduce-overhead" replays each graph as a CUDA graph
    "nano_compiled_L1": (nanogpt_setup, {"loader": "none", "layers": 1, "compile": "default"}, True),
    "nano_compiled": (nanogpt_setup, {"loader": "none", "compile": "default"}, True),
    "nano_compiled_L12": (nanogpt_setup, {"loader": "none", "layers": 12, "compile": "default"}, True),
    "nano_cudagraphs_L1": (nanogpt_setup, {"loader": "none", "layers": 1, "compile": "reduce-overhead"}, True),
    "nano_cudagraphs": (nanogpt_setup, {"loader": "none", "compile": "reduce-overhead"}, True),
    "nano_cudagraphs_L12": (nanogpt_setup, {"loader": "none", "layers": 12, "compile": "reduce-overhead"}, True),
    "llama_compiled_L1": (llama_setup, {"n_layers": 1, "compile": "default"}, True),
    "llama_compiled": (llama_setup, {"compile": "default"}, True),
    "llama_compiled_L12": (llama_setup, {"n_layers": 12, "compile": "default"}, True),
}
COMPILED_VARIANTS = [n for n, (_, kwargs, _) in VARIANTS.items() if kwargs.get("compile")]
"""The variants measured in data/h200/host/compiled/."""
DEFAULT_VARIANTS = [n for n in VARIANTS if n not in ("llama_phases16", "llama_phases8", "nano_pinned", "nano_w2_nopin",
                                                      *COMPILED_VARIANTS)]
"""The variants measured in data/h200/host/launch_bound/ (the default list)."""


def profile_step(step, amp: bool) -> dict:
    """One step under torch.profiler (CPU): time in top-level aten ops per thread, and per op name."""
    from torch.profiler import ProfilerActivity, profile

    m = Marks()
    m.start()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    with profile(activities=activities) as prof:
        step(m, amp)
        sync()
    top = collections.defaultdict(lambda: [0, 0.0])
    by_thread = collections.Counter()
    autograd_nodes = collections.Counter()
    launches = collections.Counter()
    """CUDA runtime and driver calls that launch work (cudaLaunchKernel, cuLaunchKernel[Ex], cudaGraphLaunch, ...)."""
    kernels = collections.Counter()
    """Kernels the GPU ran: Triton's (Inductor's generated code) and the others."""
    for e in prof.events():
        if "Launch" in e.name and not e.name.startswith(("aten::", "autograd::")):
            launches[e.name] += 1
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels["triton" if e.name.startswith("triton_") else "other"] += 1
        if e.name.startswith("autograd::engine::evaluate_function"):
            autograd_nodes["n"] += 1
            autograd_nodes["us"] += e.cpu_time_total
        if e.cpu_parent is None and e.name.startswith("aten::"):
            top[e.name][0] += 1
            top[e.name][1] += e.cpu_time_total
            by_thread[str(e.thread)] += e.cpu_time_total
    return {"phases_under_profiler": [(p, round(w * 1e6, 1)) for p, w, *_ in m.rows],
            "launches": dict(launches), "kernels": dict(kernels),
            "top_level_aten_us_by_thread": dict(by_thread), "autograd_nodes": dict(autograd_nodes),
            "top_level_aten": {k: [v[0], round(v[1], 1)] for k, v in sorted(top.items(), key=lambda kv: -kv[1][1])}}


def run_variant(name: str, steps: int, warmup: int, extras: bool = True) -> dict:
    setup, kwargs, amp = VARIANTS[name]
    step, n_params = setup(**kwargs)
    m = Marks()
    rows = []
    for s in range(warmup + steps):
        sync()
        m.start()
        step(m, amp)
        sync()
        m.mark("sync")
        if s >= warmup:
            rows.append(m.rows)
    phases = [p for p, *_ in rows[0]]
    out = {"name": name, "kwargs": kwargs, "autocast": amp, "params": n_params, "steps": steps,
           "step_ms": [round(sum(r[1] for r in row) * 1e3, 3) for row in rows],
           "phase_ms_median": {p: round(statistics.median(row[i][1] for row in rows) * 1e3, 3)
                               for i, p in enumerate(phases)},
           "phase_cpu_ms_median": {p: round(statistics.median(row[i][2] for row in rows) * 1e3, 3)
                                   for i, p in enumerate(phases)},
           "gc_ms_total": round(sum(r[3] for row in rows for r in row) * 1e3, 3),
           "gc_collections": sum(r[4] for row in rows for r in row)}
    out["step_ms_median"] = statistics.median(out["step_ms"])
    if kwargs.get("compile"):  # the graphs Dynamo made and the kernels Inductor generated, over all steps
        from torch._dynamo.utils import counters
        from torch._inductor import metrics

        out["dynamo"] = {k: dict(counters[k]) for k in ("stats", "graph_break") if counters[k]}
        out["inductor_generated_kernels"] = metrics.generated_kernel_count
    if extras and not SIMULATED:
        counter = CallCounter()

        class Both:
            def mark(self, phase):
                counter.mark(phase)

        sync()
        counter.start()
        step(Both(), amp)
        counter.stop()
        sync()
        out["calls"] = {p: dict(c) for p, c in counter.counts.items()}
        if name in ("nano_script", "nano_noloader", "llama_script", *COMPILED_VARIANTS):
            out["profile"] = profile_step(step, amp)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated variants, in this order (repeats allowed)")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compiled", action="store_true", help="the torch.compile'd variants (COMPILED_VARIANTS) by default")
    p.add_argument("--no-extras", action="store_true", help="skip the call counts and the profiled step")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "launch_bound.json"))
    a = p.parse_args()
    if not SIMULATED:  # a simulated run is no measurement: it must not overwrite the measurement's meta.json
        write_meta(os.path.dirname(os.path.abspath(a.out)), __file__)
    names = [n for n in a.only.split(",") if n] or (COMPILED_VARIANTS if a.compiled else DEFAULT_VARIANTS)
    env = {"torch": torch.__version__, "python": sys.version.split()[0], "simulated": SIMULATED,
           "cpu_count": os.cpu_count()}
    try:
        env["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    results = []
    for name in names:
        t0 = time.monotonic()
        r = run_variant(name, a.steps, a.warmup, extras=not a.no_extras)
        r["wall_s"] = round(time.monotonic() - t0, 2)
        results.append(r)
        print(json.dumps({k: r[k] for k in ("name", "step_ms_median", "phase_ms_median", "phase_cpu_ms_median",
                                            "gc_ms_total", "gc_collections")}), flush=True)
        with open(a.out, "w") as f:  # after each variant: a run cut short keeps what it measured
            json.dump({"env": env, "variants": results}, f)


if __name__ == "__main__":
    main()
