#!/bin/bash
# Forty-second H200 call (session 16, issue 4; x2). In situ, moe_a2a.py's plain ops take 1.5-2.5x the host time
# the model charges (and the model's per-op terms match llama_tiny's), a timeline mark 45 µs against 8.4 in a
# tight loop (call 41). Which property of the MoE process makes its host slower? moe_a2a.py on 2 ranks, each run
# with the layer and MoE marks, a probe after every step and each thread's CPU time (PHANTORA_BENCH_SCHED=1):
# - as measured (dim 2048, 8192 tokens per rank: [8192, 2048] fp32 activations, 64 MiB);
# - the same layers at dim 256, 1024 tokens (1 MiB activations): does an op's host cost grow with its tensors?
# - as measured with the process group's watchdog and monitor threads off (TORCH_NCCL_ASYNC_ERROR_HANDLING=0,
#   TORCH_NCCL_ENABLE_MONITORING=0): do they take CPU from the main thread?
# - llama_tiny on one GPU, the same records (the control: its host the model matches).
# Then llama_tiny_1gpu and nanogpt_tiny_1gpu's ground-truth commands (the lease's index).
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
call_setup 42
mkdir -p $C/timeline
(nproc; lscpu) > $C/cpu.txt 2>&1
MOE="benchmarks/workloads/moe_a2a.py --experts 8 --top-k 2 --n-layers 8 --steps 12"
LT="benchmarks/workloads/llama_train.py --parallel none --ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 --ffn-dim 1536 --vocab 32000 --seq 512 --batch 2 --steps 30"
export PHANTORA_BENCH_SCHED=1
moe() {  # NAME MOE-ARGS... (environment variables before the call apply)
  local name=$1
  shift
  PHANTORA_BENCH_TIMELINE=$C/timeline/$name timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      $MOE "$@" > $C/timeline/$name.log 2>&1
  echo "$name rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/timeline/$name.log) $(( $(date +%s) - T0 )) s"
}
moe moe_ep2 --dim 2048 --ffn-dim 4096 --tokens 8192
moe moe_ep2_small --dim 256 --ffn-dim 512 --tokens 1024
TORCH_NCCL_ASYNC_ERROR_HANDLING=0 TORCH_NCCL_ENABLE_MONITORING=0 moe moe_ep2_nowatchdog --dim 2048 --ffn-dim 4096 --tokens 8192
CUDA_VISIBLE_DEVICES=0 PHANTORA_BENCH_TIMELINE=$C/timeline/llama_tiny_1gpu timeout 60 python3 $LT > $C/timeline/llama_tiny_1gpu.log 2>&1
echo "llama_tiny rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/timeline/llama_tiny_1gpu.log) $(( $(date +%s) - T0 )) s"
moe moe_ep2_r2 --dim 2048 --ffn-dim 4096 --tokens 8192
unset PHANTORA_BENCH_SCHED
groundtruth_runs $C llama_tiny_1gpu nanogpt_tiny_1gpu
python3 benchmarks/h200/host_probe.py --label "end" >> $C/probe.jsonl
cat $C/probe.jsonl
for f in $C/timeline/*/rank0.json; do python3 -c "
import json, sys; d = json.load(open(sys.argv[1])); w = d.get('threads_wall_s')
print(sys.argv[1].split('/')[-2], w, [(t['name'], t['cpu_s']) for t in d.get('threads', []) if t['cpu_s'] > 0.05 * (w or 1)])" $f; done
(cd $OUT && tar czf call42.tgz c42 && rm -rf c42)
echo "elapsed $(( $(date +%s) - T0 )) s"
