"""Kernel-level profiles of one training step of ground-truth configurations, on real H200s
(or, with --host-calls, the host time of their library calls and step phases; with --timeline, the
host and GPU times of each layer and phase).

For each named configuration of `groundtruth.py` (llama_train.py ones), runs it exactly as the ground
truth did, with PHANTORA_BENCH_PROFILE_DIR set: after its measured steps each rank profiles one more
step (benchmarks/workloads/profile_step.py). Output: $OUT/profiles/NAME/rank{R}.json.gz and NAME.log.
Compare with a Phantora run of the same configuration: `python -m benchmarks.e2e.compare_step`.

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
    python -m benchmarks.e2e.profile_steps --out $OUT --only llama_l1b_fsdp4,llama_l8b_fsdp4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

from benchmarks.e2e import groundtruth
from benchmarks.common.env import write_meta


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", required=True, help="comma-separated configuration names")
    p.add_argument("--steps", type=int, default=6, help="measured steps (before the profiled one)")
    p.add_argument("--deadline-s", type=float, default=540)
    p.add_argument("--host-calls", action="store_true",
                   help="instead of a profiled step, time library calls and step phases on the host "
                        "(benchmarks/workloads/host_calls.py): $OUT/host_calls/NAME/rank{R}.json")
    p.add_argument("--timeline", action="store_true",
                   help="instead of a profiled step, host and GPU times of each layer and phase of every "
                        "step (benchmarks/workloads/timeline.py): $OUT/timeline/NAME/rank{R}.json")
    p.add_argument("--memory-history", action="store_true",
                   help="instead of a profiled step, the allocator segments mapped in each step and the "
                        "allocations that caused them (benchmarks/workloads/memory_history.py)")
    a = p.parse_args()
    write_meta(a.out, __file__)
    kind, variable = next((k, v) for on, k, v in (
        (a.host_calls, "host_calls", "PHANTORA_BENCH_HOST_CALLS"),
        (a.timeline, "timeline", "PHANTORA_BENCH_TIMELINE"),
        (a.memory_history, "memory_history", "PHANTORA_BENCH_MEMORY_HISTORY"),
        (True, "profiles", "PHANTORA_BENCH_PROFILE_DIR")) if on)
    configs = {c["name"]: c for c in groundtruth.CONFIGS}
    t0 = time.time()
    for name in a.only.split(","):
        c = dict(configs[name])
        if time.time() - t0 > a.deadline_s:
            print(f"{name}: skipped, deadline", flush=True)
            continue
        args = list(c["args"])
        args[args.index("--steps") + 1] = str(a.steps)
        c["args"] = args
        out = Path(a.out) / kind / name
        out.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, variable: str(out)}
        if c["world"] == 1:
            env["CUDA_VISIBLE_DEVICES"] = "0"
        started = time.time()
        with open(out.parent / f"{name}.log", "w") as log:
            done = subprocess.run(groundtruth.launch_words(c), cwd=groundtruth.REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=c["timeout"] + 60)
        print(f"{name}: exit {done.returncode}, {time.time() - started:.0f} s, files {sorted(os.listdir(out))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
