#!/bin/bash
# Tenth H200 call (session 5, issue 4; an x2 machine, none of x4 was lent): the MoE workload on 2 GPUs
# (4 local experts each) measured, then its layer timeline and one profiled step, to find where the
# simulated moe_ep4 loses 21 %.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
mkdir -p $OUT/moe2
ARGS="--dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192"
python3 -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/workloads/moe_a2a.py $ARGS --steps 12 \
    > $OUT/moe2/run.log 2>&1
PHANTORA_BENCH_TIMELINE=$OUT/moe2/timeline python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    benchmarks/workloads/moe_a2a.py $ARGS --steps 8 > $OUT/moe2/timeline.log 2>&1
PHANTORA_BENCH_PROFILE_DIR=$OUT/moe2/profile python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    benchmarks/workloads/moe_a2a.py $ARGS --steps 6 > $OUT/moe2/profile.log 2>&1
grep -h '"step_s_median"' $OUT/moe2/*.log | cut -c1-600
(cd $OUT && tar czf call10.tgz moe2)
