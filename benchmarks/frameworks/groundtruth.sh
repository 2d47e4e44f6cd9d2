#!/usr/bin/env bash
# Ground truth for the framework benchmark: run every configuration of configs.json for one GPU model on the
# real GPUs of this machine, each with a time limit, and keep its log as $OUT/<name>.log (copy them to
# data/frameworks/<gpu>/). The machine needs the frameworks: carry the wheels (benchmarks/frameworks/README.md).
#     bash benchmarks/frameworks/groundtruth.sh h200 [NAME ...]
set -u
gpu=$1; shift
out=${OUT:-/tmp/frameworks-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/gpus.csv"
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" > "$out/versions.txt" 2>&1
python3 - "$gpu" "$@" <<'PY' | while IFS=$'\t' read -r name command; do
import json, shlex, sys
gpu, only = sys.argv[1], set(sys.argv[2:])
for c in json.load(open("benchmarks/frameworks/configs.json"))["configs"]:
    if c["gpu"] != gpu or (only and c["name"] not in only):
        continue
    launch = ["python3"] if c["world"] == 1 else ["torchrun", "--standalone", "--nproc-per-node", str(c["world"])]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in c.get("env", {}).items())
    print(c["name"], f"env {env} {shlex.join(launch + [c['script']] + c['args'])}", sep="\t")
PY
    echo "== $name: $command"
    started=$(date +%s)
    timeout 150 bash -c "$command" > "$out/$name.log" 2>&1
    echo "   exit $? after $(( $(date +%s) - started )) s; $(grep -c '^step \|iteration ' "$out/$name.log") step lines"
    tail -n 2 "$out/$name.log" | cut -c1-300
done
