#!/bin/bash
# Twenty-eighth H200 call (session 12, issue 4; x4): the host cost of an all-to-all with even and uneven
# splits at each API layer (c10d, functional, autograd), on 4 and on 2 ranks (measure_a2a_host.py), for the
# mixture-of-experts row: its dispatch and combine are uneven autograd all-to-alls, and session 6's
# measurement (call 13, 2 ranks) had uneven splits 135 µs dearer than even with a wait.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
mkdir -p $OUT/w4 $OUT/w2
OUT=$OUT/w4 torchrun --standalone --nproc_per_node=4 measure_a2a_host.py 2>&1 | grep -v -i "warn\|USDT" | tail -12
OUT=$OUT/w2 CUDA_VISIBLE_DEVICES=0,1 torchrun --standalone --nproc_per_node=2 measure_a2a_host.py 2>&1 | grep -v -i "warn\|USDT" | tail -12
echo "elapsed $(( $(date +%s) - T0 )) s"
