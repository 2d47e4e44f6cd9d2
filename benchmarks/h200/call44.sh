#!/bin/bash
# Forty-fourth H200 call (session 17, issue 4; one GPU): are moe_ep4's multi-millisecond host stalls in its expert
# FFNs (calls 31 and 39, the same calls on both leases, none with balanced routing) cuBLAS kernels loaded on their
# first launch? benchmarks/h200/measure_gemm_first_use.py replays two ranks' expert row counts from call 39's
# timeline in fresh processes (lazy module loading, the default, and CUDA_MODULE_LOADING=EAGER), and sweeps every
# row count of that range under the profiler for the kernels cuBLAS picks.
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
call_setup 44
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())" > $C/env.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $C/env.txt
M=benchmarks/h200/measure_gemm_first_use.py
TL=data/h200/call39/timeline/moe_ep4
for r in 0 2; do
  timeout 120 python3 $M --replay $TL --rank $r --out $C/replay_lazy_r$r.json 2>&1 | tail -2
done
CUDA_MODULE_LOADING=EAGER timeout 180 python3 $M --replay $TL --rank 0 --out $C/replay_eager_r0.json 2>&1 | tail -2
timeout 240 python3 $M --sweep 7750 8600 --out $C/sweep_lazy.json 2>&1 | tail -2
python3 benchmarks/h200/host_probe.py --label "end" >> $C/probe.jsonl
echo "elapsed $(( $(date +%s) - T0 )) s"
