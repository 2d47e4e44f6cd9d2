#!/usr/bin/env bash
# Ground truth for the framework benchmark: run the configurations of configs.json (all, or those named) on the
# real GPUs of this machine, each with a time limit, and keep each log as $OUT/<name>.log, beside gpus.csv (the
# GPUs) and versions.txt. Copy them to data/<gpu>/e2e/frameworks/ for the GPU model they ran on. The machine needs
# the frameworks: carry their wheels (benchmarks/e2e/frameworks/README.md). The lease's host-speed probe
# (benchmarks/common/host_probe.py) runs before and after, into lease_probes.jsonl. A configuration with
# "wheels": "torchtitan" runs with .whl/torchtitan/ installed into /tmp/tt_site ahead of everything else on its
# PYTHONPATH (TorchTitan pins older huggingface-hub/datasets than transformers wants), and with TorchTitan's
# synthetic c4 in /tmp/c4_synthetic.
# With PROBE_STEPS=1 each program (not TorchTitan's, a module) runs under benchmarks/host/probe_steps.py, a host-speed
# probe after every optimizer step, into $OUT/<name>.probed.log and $OUT/<name>.probed.rank<R>.json (copy them to
# data/<gpu>/e2e/frameworks/probed/: the host-bound rows compared at the host speed they ran at).
#     [OUT=DIR] [BUNDLE=FILE.tar.gz] [TIMEOUT_S=150] [PROBE_STEPS=1] bash benchmarks/e2e/frameworks/groundtruth.sh [NAME ...]
set -u
out=${OUT:-/tmp/frameworks-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/gpus.csv"
python3 -c "import torch, transformers, accelerate, lightning, deepspeed, megatron.core as m; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'lightning', lightning.__version__, 'deepspeed', deepspeed.__version__, 'megatron-core', m.__version__)" 2>/dev/null > "$out/versions.txt"
# the lease's host speed before and after the runs (a host-bound row is only comparable at the host it ran on)
python3 -m benchmarks.common.host_probe --label start >> "$out/lease_probes.jsonl" 2>/dev/null
python3 - "$out" "$@" <<'PY' | while IFS=$'\t' read -r name command; do
import json, os, shlex, sys
out, only = sys.argv[1], set(sys.argv[2:])
probed = os.environ.get("PROBE_STEPS") == "1"
for c in json.load(open("benchmarks/e2e/frameworks/configs.json"))["configs"]:
    if only and c["name"] not in only or probed and c.get("module"):
        continue
    # one process on a machine of several GPUs sees one (the HF Trainer would take every visible GPU: DataParallel)
    launch = (["env", "CUDA_VISIBLE_DEVICES=0", "python3"] if c["world"] == 1
              else ["torchrun", "--standalone", "--nproc-per-node", str(c["world"])])
    target = ["-m", c["script"]] if c.get("module") else [c["script"]]
    if probed:
        target = ["-m", "benchmarks.host.probe_steps", f"{out}/{c['name']}.probed", c["script"]]
    env = dict(c.get("env", {}))
    if c.get("wheels") == "torchtitan":
        env["PYTHONPATH"] = "/tmp/tt_site:" + os.environ.get("PYTHONPATH", "")
    words = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    print(c["name"] + (".probed" if probed else ""), f"env {words} {shlex.join(launch + target + c['args'])}",
          sep="\t")
PY
    if [[ $command == *tt_site* && ! -d /tmp/tt_site ]]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tt_site .whl/torchtitan/*.whl < /dev/null
        python3 benchmarks/workloads/torchtitan/make_synthetic_c4.py /tmp/c4_synthetic/data.json < /dev/null
    fi
    echo "== $name: $command"
    started=$(date +%s)
    timeout "${TIMEOUT_S:-150}" bash -c "$command" > "$out/$name.log" 2>&1 < /dev/null
    echo "   exit $? after $(( $(date +%s) - started )) s; $(grep -c '^step \|iteration ' "$out/$name.log") step lines"
    tail -n 2 "$out/$name.log" | cut -c1-300
    # BUNDLE: one archive of everything so far, re-written after each configuration (a run cut short keeps it)
    if [[ -n ${BUNDLE:-} ]]; then tar czf "$BUNDLE" -C "$out" .; fi
done
python3 -m benchmarks.common.host_probe --label end >> "$out/lease_probes.jsonl" 2>/dev/null
if [[ -n ${BUNDLE:-} ]]; then tar czf "$BUNDLE" -C "$out" .; fi
