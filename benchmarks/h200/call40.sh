#!/bin/bash
# Fortieth H200 call (session 15, issue 4; x4): do the ranks of a multi-GPU job issue plain ops more slowly than a
# process alone? At the average lease (benchmarks/h200/leases.py) the one-GPU launch-bound rows are simulated
# within 2 %, but moe_ep4's plain-op stretches (the router, attention, the layer's end) take 1.35-2x the
# simulated host time (data/h200/call39). llama_tiny_1gpu's step, three interleaved rounds of: alone on GPU 0;
# four independent copies at once (GPUs 0-3); the same model with DDP on 4 ranks (its forward issues no
# collective). Layer timelines with a probe after every step and rank (PHANTORA_BENCH_SCHED=1).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
C=$OUT/c40
mkdir -p $C
host_probes start $C/probe.jsonl
TINY="--ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 --ffn-dim 1536 --vocab 32000 --seq 512 --batch 2 --steps 30"
export PHANTORA_BENCH_SCHED=1
for r in 1 2 3; do
  T=$C/r$r/timeline
  mkdir -p $T
  CUDA_VISIBLE_DEVICES=0 PHANTORA_BENCH_TIMELINE=$T/llama_tiny_1gpu timeout 60 python3 benchmarks/workloads/llama_train.py \
      --parallel none $TINY > $T/llama_tiny_1gpu.log 2>&1
  for g in 0 1 2 3; do
    CUDA_VISIBLE_DEVICES=$g PHANTORA_BENCH_TIMELINE=$T/llama_tiny_four$g timeout 60 python3 benchmarks/workloads/llama_train.py \
        --parallel none $TINY > $T/llama_tiny_four$g.log 2>&1 &
  done
  wait
  PHANTORA_BENCH_TIMELINE=$T/llama_tiny_ddp4 timeout 120 python3 -m torch.distributed.run --standalone --nproc_per_node=4 \
      benchmarks/workloads/llama_train.py --parallel ddp $TINY > $T/llama_tiny_ddp4.log 2>&1
  echo "round $r: $(grep -ho '"step_s_median": [0-9.]*' $T/*.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s"
done
unset PHANTORA_BENCH_SCHED
host_probes end $C/probe.jsonl
cat $C/probe.jsonl
(cd $OUT && tar czf call40.tgz c40 && rm -rf c40)
echo "elapsed $(( $(date +%s) - T0 )) s"
