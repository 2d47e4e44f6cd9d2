#!/bin/bash
# Thirty-fourth H200 call (session 14, issue 4; x4): one more lease for the host-bound rows, and the MoE layer's
# counts on 4 ranks. (1) moe_ep4 with the layer's marks, now with the one between the counts' cat (the wait on
# the all-to-all's result) and `.tolist()` that call 33 had on 2 ranks; host-speed probes after every step.
# (2) llama_tiny_1gpu's command with layer marks and probes after every step: its per-step host speed on this
# lease. (3) The host-bound ground-truth configurations, one at a time: the two tiny one-GPU rows, the three
# tensor-parallel rows, moe_ep4 and fsdp4_ga4.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c34/timeline
source benchmarks/h200/device_call.sh
host_probes start $OUT/c34/probe.jsonl
nproc > $OUT/c34/env.txt; grep -m1 "model name" /proc/cpuinfo >> $OUT/c34/env.txt
MOE="benchmarks/workloads/moe_a2a.py --dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192 --steps 12"
PHANTORA_BENCH_SCHED=1 PHANTORA_BENCH_TIMELINE=$OUT/c34/timeline/moe_ep4 \
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=4 $MOE > $OUT/c34/timeline/moe_ep4.log 2>&1
echo "moe timeline rc=$? $(grep -o '"step_s_median": [0-9.]*' $OUT/c34/timeline/moe_ep4.log) $(( $(date +%s) - T0 )) s"
TINY="benchmarks/workloads/llama_train.py --parallel none --ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 \
--ffn-dim 1536 --vocab 32000 --seq 512 --batch 2 --steps 30"
PHANTORA_BENCH_SCHED=1 PHANTORA_BENCH_TIMELINE=$OUT/c34/timeline/llama_tiny_1gpu \
    timeout 150 python3 $TINY > $OUT/c34/timeline/llama_tiny_1gpu.log 2>&1
echo "tiny timeline rc=$? $(( $(date +%s) - T0 )) s"
host_probes middle $OUT/c34/probe.jsonl
groundtruth_runs $OUT/c34 llama_tiny_1gpu nanogpt_tiny_1gpu llama_l1b_tp4 moe_ep4 llama_l1b_tp2 llama_l1b_fsdp2_tp2 \
    llama_l1b_fsdp4_ga4
host_probes end $OUT/c34/probe.jsonl
cat $OUT/c34/probe.jsonl
(cd $OUT && tar czf call34.tgz c34 && rm -rf c34)
echo "elapsed $(( $(date +%s) - T0 )) s"
