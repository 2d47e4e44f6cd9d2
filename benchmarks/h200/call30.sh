#!/bin/bash
# Thirtieth H200 call (session 12, issue 4; 1 GPU): the power controller's response to step-like periodic
# loads (gpu_clocks.py controller: GEMM square waves of 0.5-1.8 s periods) with NVML every 2 ms, for a
# feedback model of the clock. The 8B FSDP2 step loses its time where the real clock is cut deepest, in the
# last backward layers (docs/accuracy.md, Session 12).
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
mkdir -p $OUT/c30
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > $OUT/c30/smi_q.txt 2>&1
python3 gpu_clocks.py nvml --out $OUT/c30/nvml_controller.csv.gz -- env CUDA_VISIBLE_DEVICES=0 \
    python3 gpu_clocks.py controller --out $OUT/c30/controller.json
ls -la $OUT/c30
echo "elapsed $(( $(date +%s) - T0 )) s"
