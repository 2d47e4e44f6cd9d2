"""Profile the single-GPU llama benchmark op by op (run on the GPU machine).

Same model, optimizer and step as `benchmarks/workloads/llama_train.py --parallel none`.
Steps 0..N_PLAIN-1 run plain and record the host issue time (perf_counter before the final
synchronize) and the step time; then N_PROF steps run under the profiler with the recording
dispatch mode, so each op Phantora's runtime would see gets its kernels and their durations.
Writes $OUT/llama_ops.jsonl.gz (header line, then one line per op).
"""

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.common.env import write_meta
from benchmarks.common.encode import Recorder, attach_kernels, new_profile, out_dir, write_jsonl_gz

DRY = os.environ.get("PH_DRY") == "1"
DEV = "cpu" if DRY else "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))


def load_workload():
    path = os.path.join(HERE, "..", "workloads", "llama_train.py")
    spec = importlib.util.spec_from_file_location("llama_train", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sync():
    if not DRY:
        torch.cuda.synchronize()


def main():
    write_meta(out_dir(), __file__)
    mod = load_workload()
    if DRY:
        a = argparse.Namespace(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab=256, seq=32, batch=1)
    else:
        a = argparse.Namespace(dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_dim=8192, vocab=128256, seq=4096, batch=1)
    if os.environ.get("PH_LLAMA"):  # "dim,n_layers,n_heads,n_kv_heads,ffn_dim,vocab,seq,batch"
        v = [int(x) for x in os.environ["PH_LLAMA"].split(",")]
        a = argparse.Namespace(dim=v[0], n_layers=v[1], n_heads=v[2], n_kv_heads=v[3], ffn_dim=v[4], vocab=v[5], seq=v[6], batch=v[7])
    n_plain, n_prof = (2, 1) if DRY else (int(os.environ.get("PH_PLAIN", 6)), int(os.environ.get("PH_PROF", 3)))
    torch.manual_seed(0)
    with torch.device("meta"):
        model = mod.Llama(a)
    model.to_empty(device=DEV)
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

    def step():
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=DEV)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    plain = []
    for s in range(n_plain):
        sync()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        plain.append({"step": s, "issue_s": t1 - t0, "step_s": t2 - t0})
        print(f"plain step {s}: issue {1e3*(t1-t0):.1f} ms, step {1e3*(t2-t0):.1f} ms", flush=True)

    # One step under the recording mode only (no profiler): op count, mode overhead.
    rec0 = Recorder()
    sync()
    t0 = time.perf_counter()
    with rec0.mode("count"):
        step()
    sync()
    count_step_s = time.perf_counter() - t0

    rec = Recorder()
    kn: dict[str, int] = {}
    tag = os.environ.get("PH_TAG", "llama")
    with new_profile() as prof:
        for s in range(n_prof):
            sync()
            with rec.mode(f"{tag}|step{n_plain + 1 + s}"):
                step()
            sync()
    att, unatt = attach_kernels(prof, rec, kn, None if DRY or tag != "llama" else f"{out_dir()}/llama_raw.jsonl.gz")
    print(f"kernel ns attributed {att}, unattributed {unatt}", flush=True)
    mem = {}
    if not DRY:
        mem = {"max_memory_allocated": torch.cuda.max_memory_allocated(),
               "max_memory_reserved": torch.cuda.max_memory_reserved()}
    header = {"what": "llama_train --parallel none, one op per line", "args": vars(a),
              "plain_steps": plain, "count_step_ops": len(rec0.ops), "count_step_s": count_step_s,
              "count_step_op_names": [o["name"] for o in rec0.ops],
              "kernel_names": list(kn), "attributed_ns": att, "unattributed_ns": unatt, "memory": mem,
              "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if not DRY else "cpu"}
    if n_prof:
        write_jsonl_gz(f"{out_dir()}/{tag}_ops.jsonl.gz", header, rec.ops)
    else:
        with open(f"{out_dir()}/{tag}_steps.json", "w") as f:
            json.dump(header, f)
    steady = sorted(p["step_s"] for p in plain[3:]) or [plain[-1]["step_s"]]
    print(json.dumps({"llama_plain_median_ms_inproc": 1e3 * statistics.median(steady),
                      "issue_ms": [round(1e3 * p["issue_s"], 1) for p in plain],
                      "ops_per_step": len(rec0.ops), "prof_ops": len(rec.ops),
                      "kernel_ms_per_prof_step": att / 1e6 / n_prof, **mem}), flush=True)


if __name__ == "__main__":
    main()
