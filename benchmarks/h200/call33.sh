#!/bin/bash
# Thirty-third H200 call (session 13, issue 4; x2, no x4 was lent): where a MoE layer's read of its counts
# waits. On 4 ranks (call 31) every real rank, the slowest too, spends 300-600 µs from the counts' all-to-all
# through `.tolist()`, the simulated ones ~150. moe_a2a.py on 2 ranks with a mark between the counts' cat (the
# wait on the all-to-all's result) and `.tolist()` (the device-to-host copy and its wait), host probes after
# every step; then one step under the profiler with every host op and CUDA runtime call
# (PHANTORA_BENCH_PROFILE_HOST_ALL=1): how long wait_tensor, the NCCL launch, the copy and the synchronize take.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c33/timeline $OUT/c33/profile
python3 benchmarks/h200/host_probe.py --label "start" >> $OUT/c33/probe.jsonl
MOE="benchmarks/workloads/moe_a2a.py --dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192 --steps 12"
PHANTORA_BENCH_SCHED=1 PHANTORA_BENCH_TIMELINE=$OUT/c33/timeline/moe_ep2 \
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=2 $MOE > $OUT/c33/timeline/moe_ep2.log 2>&1
echo "timeline rc=$? $(grep -o '"step_s_median": [0-9.]*' $OUT/c33/timeline/moe_ep2.log) $(( $(date +%s) - T0 )) s"
PHANTORA_BENCH_PROFILE_DIR=$OUT/c33/profile/moe_ep2 PHANTORA_BENCH_PROFILE_CPU=1 PHANTORA_BENCH_PROFILE_HOST_ALL=1 \
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=2 $MOE > $OUT/c33/profile/moe_ep2.log 2>&1
echo "profile rc=$? $(grep -o '"step_s_median": [0-9.]*' $OUT/c33/profile/moe_ep2.log) $(( $(date +%s) - T0 )) s"
python3 benchmarks/h200/host_probe.py --label "end" >> $OUT/c33/probe.jsonl
cat $OUT/c33/probe.jsonl
(cd $OUT && tar czf call33.tgz c33 && rm -rf c33)
echo "elapsed $(( $(date +%s) - T0 )) s"
