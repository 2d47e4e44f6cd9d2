#!/bin/bash
# Thirteenth H200 call (session 6, issue 4; x2): measure_moe_host.py again (same lease as call 12) with the fixed uneven case, a2a without wait, c10d a2a, and a CPU profile of
# functional all-to-alls (PH_PROFILE_A2A=1).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c13
PH_PROFILE_A2A=1 OUT=$OUT/c13 python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/h200/measure_moe_host.py \
    > $OUT/c13/moe_host.log 2>&1
grep -v USDT $OUT/c13/moe_host.log | grep -v "^\[\|\*\*\*\|OMP"
