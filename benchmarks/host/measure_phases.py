"""Host time per phase of the llama step when the GPU is not the bottleneck (third H200 call).

The llama model with tiny shapes (same op sequence as the benchmark, ~8.4k ops/step) so every
kernel is short and the step is host-bound; each phase ends with a synchronize so the time of
forward (+loss), backward, clip_grad_norm_ and optimizer step are measured separately. Also the
number of ops per phase as the runtime sees them. Writes $OUT/phases.json.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks.common.env import write_meta
from benchmarks.common.encode import Recorder, out_dir
from benchmarks.kernels.measure_in_step import DEV, DRY, load_workload, sync


def run(dims, steps=12):
    mod = load_workload()
    a = argparse.Namespace(**dims)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = mod.Llama(a)
    model.to_empty(device=DEV)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    res = []
    names = {}
    for s in range(steps):
        rec = Recorder() if s == steps - 1 else None
        marks = []

        def mark():
            sync()
            marks.append(time.perf_counter())

        def phase(name, fn):
            if rec is None:
                return fn()
            with rec.mode(name):
                return fn()

        mark()
        idx = phase("fwd", lambda: torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=DEV))

        def fwd():
            with torch.autocast(DEV, dtype=torch.bfloat16):
                logits = model(idx[:, :-1])
                return F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten())
        loss = phase("fwd", fwd)
        mark()
        phase("bwd", loss.backward)
        mark()
        phase("clip", lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        mark()
        phase("opt", opt.step)
        opt.zero_grad(set_to_none=True)
        mark()
        res.append([marks[i + 1] - marks[i] for i in range(4)])
        if rec is not None:
            for o in rec.ops:
                names.setdefault(o["ctx"], []).append(o["name"])
    steady = res[3:-1] or res[1:]
    med = [statistics.median(x[i] for x in steady) for i in range(4)]
    return {"dims": dims, "phase_s_median": dict(zip(["fwd", "bwd", "clip", "opt"], med)), "all": res,
            "ops": {k: len(v) for k, v in names.items()}, "op_names": names}


def main():
    write_meta(out_dir(), __file__)
    out = []
    for dims in [dict(dim=384, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim=512, vocab=1024, seq=64, batch=1),
                 dict(dim=256, n_layers=16, n_heads=16, n_kv_heads=8, ffn_dim=512, vocab=1024, seq=64, batch=1),
                 dict(dim=384, n_layers=8, n_heads=24, n_kv_heads=8, ffn_dim=512, vocab=1024, seq=64, batch=1)]:
        r = run(dims, steps=4 if DRY else 12)
        out.append(r)
        print(json.dumps({"dims": dims, "phase_ms": {k: round(v * 1e3, 2) for k, v in r["phase_s_median"].items()},
                          "ops": r["ops"]}), flush=True)
    with open(f"{out_dir()}/phases.json", "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
