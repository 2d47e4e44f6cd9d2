#!/bin/bash
# Thirty-first H200 call (session 13, issue 4; x4): where the MoE forward's host time goes. moe_ep4's real forward
# is host-bound and takes ~1.5x the simulated host time (calls 10 and 27). Layer timelines with finer marks inside
# each MoE layer (counts all-to-all, .tolist(), gather, dispatch all-to-all, split, each expert's cat and FFN,
# combine cat and all-to-all, weighting; benchmarks/workloads/moe_a2a.py), with routing as usual and with
# --balanced-routing (no new GEMM shapes, even splits), host-speed probes after every step; then moe_ep4 and the
# two tiny one-GPU rows as plain ground truth on this lease.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c31/timeline
source benchmarks/h200/device_call.sh
host_probes start $OUT/c31/probe.jsonl
nproc > $OUT/c31/env.txt; grep -m1 "model name" /proc/cpuinfo >> $OUT/c31/env.txt
MOE="benchmarks/workloads/moe_a2a.py --dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192 --steps 12"
for variant in routed balanced; do
  extra=""; [ $variant = balanced ] && extra="--balanced-routing"
  PHANTORA_BENCH_SCHED=1 PHANTORA_BENCH_TIMELINE=$OUT/c31/timeline/moe_ep4_$variant \
      timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=4 $MOE $extra \
      > $OUT/c31/timeline/moe_ep4_$variant.log 2>&1
  echo "$variant rc=$? $(grep -o '"step_s_median": [0-9.]*' $OUT/c31/timeline/moe_ep4_$variant.log) $(( $(date +%s) - T0 )) s"
done
host_probes middle $OUT/c31/probe.jsonl
groundtruth_runs $OUT/c31 moe_ep4 llama_tiny_1gpu nanogpt_tiny_1gpu
host_probes end $OUT/c31/probe.jsonl
cat $OUT/c31/probe.jsonl
(cd $OUT && tar czf call31.tgz c31 && rm -rf c31)
echo "elapsed $(( $(date +%s) - T0 )) s"
