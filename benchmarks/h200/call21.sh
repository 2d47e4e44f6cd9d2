#!/bin/bash
# Twenty-first H200 call (session 10, issue 4; x4): the power cap seen through NVML every 2 ms (SM clock and
# instantaneous power; nvidia-smi shows a one-second power average and a 100 ms clock). One GPU's step and
# duty-cycle responses to GEMMs, then the 8B and 1.5B FSDP2 steps, the 3B one-GPU step and TorchTitan's 8B
# with layer timelines, to fit a power-capped clock model (docs/compute-model.md, "Power cap").
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
H=$PWD
mkdir -p $OUT/c21
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > $OUT/c21/smi_q.txt 2>&1
python3 gpu_clocks.py nvml --out $OUT/c21/nvml_duty.csv.gz -- env CUDA_VISIBLE_DEVICES=0 python3 gpu_clocks.py duty --out $OUT/c21/duty.json
echo "duty done $(( $(date +%s) - T0 )) s"
for name in llama_l8b_fsdp4 llama_l3b_1gpu llama_l1b_fsdp4; do
  python3 gpu_clocks.py nvml --out $OUT/c21/nvml_$name.csv.gz -- \
    python3 profile_steps.py --out $OUT/c21 --timeline --steps 10 --only $name 2>&1 | grep -v USDT | tail -2
  echo "$name done $(( $(date +%s) - T0 )) s"
done
python3 - <<'PY'
import os, subprocess, groundtruth
site, err = groundtruth.setup_torchtitan()
if not site:
    raise SystemExit(f"torchtitan setup: {err}")
c = dict(next(c for c in groundtruth.CONFIGS if c["name"] == "torchtitan_llama3_8b_fsdp4"))
out = os.environ["OUT"] + "/c21"
env = {**os.environ, "PYTHONPATH": site}
with open(f"{out}/torchtitan.log", "w") as log:
    done = subprocess.run(["python3", f"{groundtruth.REPO}/benchmarks/h200/gpu_clocks.py", "nvml", "--out",
                           f"{out}/nvml_torchtitan.csv.gz", "--", *groundtruth.launch_words(c)],
                          cwd=groundtruth.REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=300)
print("torchtitan exit", done.returncode)
PY
grep -h "step:" $OUT/c21/torchtitan.log | tail -3
grep -ho '"step_s_median": [0-9.]*' $OUT/c21/timeline/*.log
(cd $OUT/c21 && tar czf timeline.tgz timeline && rm -rf timeline)
ls -la $OUT/c21
echo "elapsed $(( $(date +%s) - T0 )) s"
