"""Print a short table of what a measurement call wrote under $OUT (last thing a call prints)."""

import gzip
import json
import os

from benchmarks.common.encode import out_dir

d = out_dir()
for line in open(f"{d}/llama_plain.txt") if os.path.exists(f"{d}/llama_plain.txt") else []:
    if line.startswith("{"):
        r = json.loads(line)
        print(f"llama plain: median {1e3*r['step_s_median']:.1f} ms, alloc {r['max_mem_alloc_gib']:.2f} GiB, reserved {r['max_mem_reserved_gib']:.2f} GiB")
if os.path.exists(f"{d}/device.json"):
    dv = json.load(open(f"{d}/device.json"))
    print("device", dv.get("name"), "total", dv["props"].get("total_memory"), "sm", dv["props"].get("multi_processor_count"),
          "L2", dv["props"].get("L2_cache_size"))
    for r in dv.get("readings", []):
        print("  ", r["label"], "context", r["context"], "reserved", r["reserved"])
for name in sorted(os.listdir(d)):
    if name.endswith(".jsonl.gz"):
        with gzip.open(f"{d}/{name}", "rt") as f:
            h = json.loads(f.readline())
            n = sum(1 for _ in f)
        print(f"{name}: {n} ops, {os.path.getsize(f'{d}/{name}')/2**20:.2f} MiB, errors {len(h.get('errors', [])) if isinstance(h, dict) else '-'}")
for name in sorted(os.listdir(d)):
    print("  file", name, os.path.getsize(f"{d}/{name}"))
