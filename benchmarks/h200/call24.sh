#!/bin/bash
# Twenty-fourth H200 call (session 11, issue 4; x4): TorchTitan's Llama 3 8B FSDP2 configuration measured
# twice more as groundtruth.py runs it (one run so far, call 3), for its spread between runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
for round in 1 2; do
  python3 groundtruth.py --out $OUT/g$round --only torchtitan_llama3_8b_fsdp4 --overlap-before none --deadline-s 250 2>&1 \
      | grep -v USDT | cut -c1-220
done
ls -la $OUT/g1 $OUT/g2
echo "elapsed $(( $(date +%s) - T0 )) s"
