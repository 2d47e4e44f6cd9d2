#!/bin/bash
# Twelfth H200 call (session 6, issue 4; x2): measure_moe_host.py again with its added cases: cuBLAS
# algorithm selection for GEMM shapes a process has not run (by size and layout, new against seen),
# AsyncCollectiveTensor's Python dispatch, small even and uneven functional all-to-alls.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c12
OUT=$OUT/c12 python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/h200/measure_moe_host.py \
    > $OUT/c12/moe_host.log 2>&1
grep -v USDT $OUT/c12/moe_host.log | grep " us"
