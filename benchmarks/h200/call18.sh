#!/bin/bash
# Eighteenth H200 call (session 8, issue 4): measure every op signature of the accuracy benchmark's
# configurations that the shipped kernel database lacks. The signatures come from short simulations
# (benchmarks/coverage_ops.py -> data/h200/coverage/ops/*.jsonl); `phantora profile --only-missing`
# rebuilds and times each on the GPU (cold L2, 3 warm-up + 5 timed calls, kernel time from the
# profiler), heaviest first. One process on GPU 0. Result: $OUT/c18/coverage_kernels.jsonl (+ report).
# A second call with AGAINST=<first result> continues where a time limit stopped the first.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c18
export CUDA_VISIBLE_DEVICES=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/c18/gpu.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $OUT/c18/gpu.txt
extra=()
if [ -n "$AGAINST" ]; then extra=(--against src/phantora/data/h200/kernels.jsonl --against "$AGAINST"); fi
PYTHONPATH=src python3 -m phantora.profiler data/h200/coverage/ops/*.jsonl --only-missing "${extra[@]}" \
  --out $OUT/c18/coverage_kernels.jsonl --time-limit ${TIME_LIMIT:-450} > $OUT/c18/profile.log 2>&1
echo "profile rc $?"
tail -25 $OUT/c18/profile.log
echo "elapsed $(( $(date +%s) - T0 )) s"
