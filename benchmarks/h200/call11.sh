#!/bin/bash
# Eleventh H200 call (session 6, issue 4; an x2 machine, no x4 was lent): where the MoE layer's host
# time goes. The moe_ep4 workload on 2 GPUs (4 local experts each, as call 10) with its layer timeline
# and marks inside each MoE forward (router, sort, counts, splits, dispatch, each expert, combine), its
# plain step time twice more, and the host cost of the MoE layer's calls one by one (measure_moe_host.py).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c11
ARGS="--dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192"
RUN="python3 -m torch.distributed.run --standalone --nproc_per_node=2"
PHANTORA_BENCH_TIMELINE=$OUT/c11/timeline $RUN benchmarks/workloads/moe_a2a.py $ARGS --steps 12 \
    > $OUT/c11/timeline.log 2>&1
OUT=$OUT/c11 $RUN benchmarks/h200/measure_moe_host.py > $OUT/c11/moe_host.log 2>&1
grep -v USDT $OUT/c11/moe_host.log | tail -14
for round in 1 2; do
  $RUN benchmarks/workloads/moe_a2a.py $ARGS --steps 12 > $OUT/c11/run$round.log 2>&1
done
grep -h '"step_s_median"' $OUT/c11/*.log | cut -c1-400
(cd $OUT && tar czf call11.tgz c11)
echo "elapsed $(( $(date +%s) - T0 )) s"
