#!/bin/bash
# Twentieth H200 call (session 9, issue 4; x4): GPU clocks and power while the FSDP2 8B and 1.5B steps
# run (their backward layers slow down step after step in real profiles; the simulated ones do not),
# beside the layer timelines, and one GPU's clock under GEMM bursts of growing length.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
mkdir -p $OUT/c20
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > $OUT/c20/smi_q.txt 2>&1
CUDA_VISIBLE_DEVICES=0 python3 gpu_clocks.py gemm --out $OUT/c20/gemm_bursts.json
for name in llama_l8b_fsdp4 llama_l1b_fsdp4 llama_l1b_1gpu; do
  python3 gpu_clocks.py sample --out $OUT/c20/smi_$name.csv -- \
    python3 profile_steps.py --out $OUT/c20 --timeline --steps 10 --only $name 2>&1 | grep -v USDT | tail -3
done
nvidia-smi -q -d PERFORMANCE > $OUT/c20/smi_q_after.txt 2>&1
grep -ho '"step_s_median": [0-9.]*' $OUT/c20/timeline/*.log
(cd $OUT/c20 && tar czf timeline.tgz timeline && rm -rf timeline)
echo "elapsed $(( $(date +%s) - T0 )) s"
