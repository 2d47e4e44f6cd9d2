#!/bin/bash
# Forty-first H200 call (session 16, issue 4; x2, no x4 was lent). Three things on one lease whose speed the
# ground-truth runs in it give (benchmarks/h200/leases.py: llama_tiny, nanogpt_tiny twice each, tp2 once):
# 1. FSDP2's library calls (models/host.py LIBRARY_CALL_NS, ACCUMULATING_CALL_NS) were fitted on leases of
#    unknown speed (session 4's host_calls, call 36). The same commands again, with each call's exclusive host
#    time recorded: llama_l1b_fsdp2 and llama_l1b_tp2 as data/h200/host_calls (profile_steps.py --host-calls),
#    and call 36's batch-1 FSDP2 runs with 4 micro-steps and with 1.
# 2. What a timeline mark costs in situ (fit_moe_host.py takes ~33 µs off each stretch, from a stretch of
#    almost nothing but a mark; in a tight loop a mark takes 8.4 µs: call 35): moe_a2a.py on 2 ranks with every
#    other step marked (PHANTORA_BENCH_MARK_AB=1), twice; benchmarks/h200/mark_cost.py.
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
call_setup 41
mkdir -p $C/mark_ab $C/host_calls
(nproc; lscpu) > $C/cpu.txt 2>&1
MOE="benchmarks/workloads/moe_a2a.py --dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192 --steps 39"
L1B="benchmarks/workloads/llama_train.py --parallel fsdp --ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 1 --steps 8"
mark_ab() {
  PHANTORA_BENCH_MARK_AB=1 PHANTORA_BENCH_TIMELINE=$C/mark_ab/moe_ep2_$1 timeout 150 python3 -m torch.distributed.run \
      --standalone --nproc_per_node=2 $MOE > $C/mark_ab/moe_ep2_$1.log 2>&1
  echo "mark_ab $1 rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/mark_ab/moe_ep2_$1.log) $(( $(date +%s) - T0 )) s"
}
groundtruth_runs $C/a llama_tiny_1gpu nanogpt_tiny_1gpu
(cd benchmarks/h200 && python3 profile_steps.py --out $C --host-calls --steps 8 --only llama_l1b_fsdp2,llama_l1b_tp2 2>&1 \
    | grep -v USDT | cut -c1-200)
echo "host_calls $(( $(date +%s) - T0 )) s"
mark_ab r1
for accum in 4 1; do
  PHANTORA_BENCH_HOST_CALLS=$C/host_calls/fsdp2_ga$accum timeout 200 python3 -m torch.distributed.run --standalone \
      --nproc_per_node=2 $L1B --grad-accum $accum > $C/host_calls/fsdp2_ga$accum.log 2>&1
  echo "ga$accum rc=$? $(grep -o '"step_s_median": [0-9.]*' $C/host_calls/fsdp2_ga$accum.log) $(( $(date +%s) - T0 )) s"
done
groundtruth_runs $C/b llama_l1b_tp2
mark_ab r2
groundtruth_runs $C/c llama_tiny_1gpu nanogpt_tiny_1gpu
python3 benchmarks/h200/host_probe.py --label "end" >> $C/probe.jsonl
cat $C/probe.jsonl
(cd $OUT && tar czf call41.tgz c41 && rm -rf c41)
echo "elapsed $(( $(date +%s) - T0 )) s"
