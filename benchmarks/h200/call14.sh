#!/bin/bash
# Fourteenth H200 call (session 7, issue 4; an x4 machine): the 4-GPU configurations furthest from the
# simulation. Layer timelines with the main thread's scheduler counters and host-speed probes per step
# and rank (PHANTORA_BENCH_SCHED=1, benchmarks/workloads/timeline.py) for tp4 (twice) and fsdp2_tp2: is
# the straggler rank slow at everything or waiting for a CPU? moe_ep4's timeline with marks inside each
# MoE forward and every call's expert row counts, and its plain step twice; fsdp4_ga4 twice more.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
nproc > $OUT/nproc.txt; lscpu | grep -E "^CPU\(s\)|Model name|MHz|NUMA node" >> $OUT/nproc.txt
cat /proc/sys/kernel/sched_schedstats >> $OUT/nproc.txt 2>&1
export PHANTORA_BENCH_SCHED=1
for round in 1 2; do
  python3 profile_steps.py --out $OUT/r$round --timeline --steps 12 --only llama_l1b_tp4 2>&1 | grep -v USDT
done
python3 profile_steps.py --out $OUT/r1 --timeline --steps 12 --only llama_l1b_fsdp2_tp2,moe_ep4 2>&1 | grep -v USDT
unset PHANTORA_BENCH_SCHED
for round in 1 2; do
  python3 groundtruth.py --out $OUT/g$round --only moe_ep4,llama_l1b_fsdp4_ga4 --overlap-before none --deadline-s 200 2>&1 \
      | grep -v USDT | cut -c1-220
done
grep -ho '"step_s_median": [0-9.]*' $OUT/r*/timeline/*.log
(cd $OUT && tar czf call14.tgz r1 r2 g1 g2 nproc.txt)
echo "elapsed $(( $(date +%s) - T0 )) s"
