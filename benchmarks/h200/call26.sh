#!/bin/bash
# Twenty-sixth H200 call (session 11, issue 4; x4): configurations measured once so far (call 1), twice
# more as groundtruth.py runs them, so that their step time and their peak reserved memory (which differs
# between runs of one command by a segment; data/h200/memory_history/) are medians of three runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
ONLY=llama_l1b_1gpu,llama_l1b_ac_1gpu,llama_l1b_ga4_1gpu,llama_l3b_1gpu,llama_l1b_ddp4,llama_l3b_fsdp4,llama_l3b_fsdp4_ac,nanogpt_124m_1gpu
for round in 1 2; do
  python3 groundtruth.py --out $OUT/g$round --only $ONLY --overlap-before none --deadline-s 270 2>&1 \
      | grep -v USDT | grep -E "rc=|done|skipped" | cut -c1-200
done
ls -la $OUT/g1 $OUT/g2
echo "elapsed $(( $(date +%s) - T0 )) s"
