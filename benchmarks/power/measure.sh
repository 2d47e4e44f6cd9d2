#!/bin/bash
# GPU clocks and power under the power cap, for the power model (benchmarks/power/fit.py).
#
#     benchmarks/common/run_subject.sh power WHAT [CONFIGS]
#
# WHAT:
#   nvml CONFIGS   NVML every 2 ms (SM clock, instantaneous power, clock-event reasons) of GPU 0 under `gpu_clocks.py
#                  duty` (GEMMs and adds back to back and on/off), then of every GPU while each configuration
#                  (comma-separated) runs 10 steps with layer timelines
#   clocks         nvidia-smi's view (every 20 ms) and kernel times in bursts after an idle second (`gpu_clocks.py gemm`)
#   controller     the power controller under step-like periodic loads (`gpu_clocks.py controller`)
#   chip_spread    every GPU of the machine running the same GEMMs, attention and adds at once (`measure_chip_spread.py`
#                  under `gpu_clocks.py sample`): how much the chips differ (benchmarks/power/fit_chip_spread.py)
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: power/measure.sh WHAT [CONFIGS] (see its header)}
clocks="python3 -m benchmarks.power.gpu_clocks"
case $what in
  nvml)
    dir=$(leaf power nvml)
    nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > "$dir/smi_q.txt" 2>&1
    $clocks nvml --out "$dir/nvml_duty.csv.gz" -- env CUDA_VISIBLE_DEVICES=0 $clocks duty --out "$dir/duty.json"
    for name in ${2//,/ }; do
      $clocks nvml --out "$dir/nvml_$name.csv.gz" -- \
          python3 -m benchmarks.e2e.profile_steps --out "$dir/steps" --timeline --steps 10 --only "$name" 2>&1 | tail -2
    done
    meta "$dir" benchmarks/power/gpu_clocks.py "nvml -- duty; nvml -- profile_steps --timeline --steps 10 --only ${2:-}" ;;
  clocks)
    dir=$(leaf power clocks)
    nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > "$dir/smi_q.txt" 2>&1
    CUDA_VISIBLE_DEVICES=0 $clocks gemm --out "$dir/gemm_bursts.json"
    nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > "$dir/smi_q_after.txt" 2>&1
    meta "$dir" benchmarks/power/gpu_clocks.py gemm ;;
  controller)
    dir=$(leaf power controller)
    nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > "$dir/smi_q.txt" 2>&1
    $clocks nvml --out "$dir/nvml_controller.csv.gz" -- env CUDA_VISIBLE_DEVICES=0 $clocks controller \
        --out "$dir/controller.json"
    gzip -f "$dir/controller.json"
    meta "$dir" benchmarks/power/gpu_clocks.py controller ;;
  chip_spread)
    dir=$(leaf power chip_spread)
    $clocks sample --out "$dir/smi.csv" -- python3 -m benchmarks.power.measure_chip_spread --out "$dir" \
        --seconds 12 --rounds 2 | tee "$dir/log.txt"
    gzip -f "$dir/smi.csv"
    meta "$dir" benchmarks/power/measure_chip_spread.py --seconds 12 --rounds 2 ;;
  *) echo "power: unknown WHAT $what (see benchmarks/power/measure.sh)" >&2; exit 2 ;;
esac
