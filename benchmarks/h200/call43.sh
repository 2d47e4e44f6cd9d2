#!/bin/bash
# Forty-third H200 call (session 16, issue 4; x2, no x4 was lent): FSDP2's library calls on a second lease whose
# speed its ground-truth runs give (call 41 was the first; benchmarks/h200/fit_fsdp_calls.py pools them). The same
# commands as call 41: llama_l1b_fsdp2's ground-truth command with each FSDP2 call's exclusive host time recorded
# (profile_steps.py --host-calls), the batch-1 runs with 4 micro-steps and with 1; around them llama_tiny,
# nanogpt_tiny (twice each) and tp2's ground-truth commands (the lease's index, benchmarks/h200/leases.py).
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
call_setup 43
mkdir -p $C/host_calls
L1B="benchmarks/workloads/llama_train.py --parallel fsdp --ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 1 --steps 8"
groundtruth_runs $C/a llama_tiny_1gpu nanogpt_tiny_1gpu
(cd benchmarks/h200 && python3 profile_steps.py --out $C --host-calls --steps 8 --only llama_l1b_fsdp2 2>&1 | grep -v USDT | cut -c1-200)
for accum in 4 1; do
  PHANTORA_BENCH_HOST_CALLS=$C/host_calls/fsdp2_ga$accum timeout 200 python3 -m torch.distributed.run --standalone \
      --nproc_per_node=2 $L1B --grad-accum $accum > $C/host_calls/fsdp2_ga$accum.log 2>&1
  echo "ga$accum rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/host_calls/fsdp2_ga$accum.log) $(( $(date +%s) - T0 )) s"
done
groundtruth_runs $C/b llama_l1b_tp2 llama_tiny_1gpu nanogpt_tiny_1gpu
python3 benchmarks/h200/host_probe.py --label "end" >> $C/probe.jsonl
cat $C/probe.jsonl
(cd $OUT && tar czf call43.tgz c43 && rm -rf c43)
echo "elapsed $(( $(date +%s) - T0 )) s"
