#!/bin/bash
# Thirty-sixth H200 call (session 14, issue 4; x2): what FSDP2's post_backward costs the host when a micro-step
# keeps its gradients (gradient accumulation, `set_requires_gradient_sync(False)`). LIBRARY_CALL_NS's 1.05 ms
# was measured on the reducing path. The 1.5B llama on 2 GPUs with FSDP2, batch 1, with 4 micro-steps and with
# 1, each library call's exclusive host time recorded (benchmarks/workloads/host_calls.py); host probes around.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c36
python3 benchmarks/h200/host_probe.py --label "start" >> $OUT/c36/probe.jsonl
L1B="--parallel fsdp --ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 1 --steps 8"
for accum in 4 1; do
  PHANTORA_BENCH_HOST_CALLS=$OUT/c36/fsdp2_ga$accum timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      benchmarks/workloads/llama_train.py $L1B --grad-accum $accum > $OUT/c36/fsdp2_ga$accum.log 2>&1
  echo "ga$accum rc=$? $(grep -o '"step_s_median": [0-9.]*' $OUT/c36/fsdp2_ga$accum.log) $(( $(date +%s) - T0 )) s"
done
python3 benchmarks/h200/host_probe.py --label "end" >> $OUT/c36/probe.jsonl
cat $OUT/c36/probe.jsonl
(cd $OUT && tar czf call36.tgz c36 && rm -rf c36)
echo "elapsed $(( $(date +%s) - T0 )) s"
