#!/bin/bash
# Forty-fifth H200 call (session 17, issue 4; one GPU): which kernels cuBLAS picks for each GEMM of moe_a2a's
# expert FFN (forward and backward) at every row count from 7600 to 8800 (benchmarks/h200/measure_gemm_first_use.py
# --sweep, the problems recorded as autograd issues them), and ranks 1 and 3's row counts replayed in fresh
# processes (call 44 replayed ranks 0 and 2).
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
call_setup 45
M=benchmarks/h200/measure_gemm_first_use.py
TL=data/h200/call39/timeline/moe_ep4
for r in 1 3; do
  timeout 120 python3 $M --replay $TL --rank $r --out $C/replay_lazy_r$r.json 2>&1 | tail -1
done
timeout 400 python3 $M --sweep 7600 8800 --out $C/sweep.json 2>&1 | grep -v warn | tail -2
python3 benchmarks/h200/host_probe.py --label "end" >> $C/probe.jsonl
echo "elapsed $(( $(date +%s) - T0 )) s"
