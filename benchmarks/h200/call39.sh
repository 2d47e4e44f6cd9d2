#!/bin/bash
# Thirty-ninth H200 call (session 15, issue 4; x4): the host-bound configurations on a new x4 lease, and where a
# tensor-parallel step's clip and optimizer spend their host time. The real timelines' clip_grad_norm_ and
# AdamW phases of tp2/tp4 take 6-11 and 8-17 ms against 4 and 7 simulated (call 38 and earlier x4 timelines).
# - host-speed probes (alone and four at once) at the start, middle and end;
# - one profiled tp4 step with every host op (PHANTORA_BENCH_PROFILE_CPU=1, PHANTORA_BENCH_PROFILE_HOST_ALL=1);
# - moe_ep4's layer timeline with the marks inside each MoE layer (the counts' cat among them) and a probe
#   after each step and rank;
# - ground truth, one configuration at a time: llama_tiny_1gpu, nanogpt_tiny_1gpu, llama_l1b_tp4, moe_ep4,
#   llama_l1b_fsdp2_tp2, llama_l1b_tp2, llama_l1b_fsdp4_ga4.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
C=$OUT/c39
mkdir -p $C/timeline $C/profile
(nproc; lscpu) > $C/cpu.txt 2>&1
host_probes start $C/probe.jsonl
TP4="benchmarks/workloads/llama_train.py --parallel tp --ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 2 --steps 6"
PHANTORA_BENCH_PROFILE_DIR=$C/profile/llama_l1b_tp4 PHANTORA_BENCH_PROFILE_CPU=1 PHANTORA_BENCH_PROFILE_HOST_ALL=1 \
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=4 $TP4 > $C/profile/llama_l1b_tp4.log 2>&1
echo "profile rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/profile/llama_l1b_tp4.log) $(( $(date +%s) - T0 )) s"
MOE="benchmarks/workloads/moe_a2a.py --dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192 --steps 12"
PHANTORA_BENCH_SCHED=1 PHANTORA_BENCH_TIMELINE=$C/timeline/moe_ep4 \
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=4 $MOE > $C/timeline/moe_ep4.log 2>&1
echo "moe timeline rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/timeline/moe_ep4.log) $(( $(date +%s) - T0 )) s"
host_probes middle $C/probe.jsonl
groundtruth_runs $C llama_tiny_1gpu nanogpt_tiny_1gpu llama_l1b_tp4 moe_ep4 llama_l1b_fsdp2_tp2 llama_l1b_tp2 llama_l1b_fsdp4_ga4
host_probes end $C/probe.jsonl
cat $C/probe.jsonl
(cd $OUT && tar czf call39.tgz c39 && rm -rf c39)
echo "elapsed $(( $(date +%s) - T0 )) s"
