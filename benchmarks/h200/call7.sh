#!/bin/bash
# Seventh H200 call (session 5, issues 3 and 4): layer-by-layer host and GPU timelines of the FSDP2,
# TP and 1-GPU configurations without a profiler (benchmarks/workloads/timeline.py), and the
# allocator's segment history over 12 steps (benchmarks/workloads/memory_history.py).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
python3 profile_steps.py --out $OUT/r --timeline --steps 8 --deadline-s 330 \
    --only llama_l1b_fsdp4,llama_l1b_1gpu,llama_l1b_tp2,llama_l1b_fsdp2,llama_l8b_fsdp4,llama_l3b_fsdp4_ac 2>&1 | grep -v USDT
python3 profile_steps.py --out $OUT/r --memory-history --steps 12 --deadline-s 150 \
    --only llama_l1b_1gpu,llama_l1b_fsdp4 2>&1 | grep -v USDT
(cd $OUT/r && tar czf $OUT/call7.tgz .)
grep -h '"step_s_median"' $OUT/r/*/*.log | cut -c1-400
echo "elapsed $(( $(date +%s) - T0 )) s"
