#!/bin/bash
# Twenty-seventh H200 call (session 12, issue 4; x4): the host-bound configurations on a new lease, with a
# host-speed probe after every step and rank. Does the host-contention model (models/host_contention.py,
# fitted on calls 14-15: a third of the time 1.51x slower) hold on another lease, and what do the rows whose
# error follows the lease measure here? Layer timelines with probes (PHANTORA_BENCH_SCHED=1) of tp4, tp2,
# fsdp2_tp2, moe_ep4 and llama_tiny; then plain ground-truth runs, one configuration at a time.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c27
source benchmarks/h200/device_call.sh
host_probes start $OUT/c27/probe.jsonl
nproc > $OUT/c27/env.txt; grep -m1 "model name" /proc/cpuinfo >> $OUT/c27/env.txt
cd benchmarks/h200
PHANTORA_BENCH_SCHED=1 python3 profile_steps.py --out $OUT/c27 --timeline --steps 12 --deadline-s 300 \
    --only llama_l1b_tp4,llama_l1b_tp2,llama_l1b_fsdp2_tp2,moe_ep4,llama_tiny_1gpu 2>&1 | grep -v USDT
echo "timelines done $(( $(date +%s) - T0 )) s"
cd ../..
host_probes middle $OUT/c27/probe.jsonl
groundtruth_runs $OUT/c27 llama_tiny_1gpu nanogpt_tiny_1gpu moe_ep4 llama_l1b_tp4
host_probes end $OUT/c27/probe.jsonl
cat $OUT/c27/probe.jsonl
grep -ho '"step_s_median": [0-9.]*' $OUT/c27/timeline/*.log
(cd $OUT && tar czf call27.tgz c27)
echo "elapsed $(( $(date +%s) - T0 )) s"
