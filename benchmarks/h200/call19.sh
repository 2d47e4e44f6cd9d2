#!/bin/bash
# Nineteenth H200 call (session 8, issue 4): every op signature of the accuracy benchmark's
# configurations measured twice more, all of them (also those the shipped database has from inside
# real training steps): with the L2 evicted before each timed call (as call 18) and with it warm
# (`--hot`), to tell which microbenchmark setting matches an op's time inside a step.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c19
export CUDA_VISIBLE_DEVICES=0
PYTHONPATH=src python3 -m phantora.profiler data/h200/coverage/ops/*.jsonl --hot --out $OUT/c19/all_hot.jsonl \
  --time-limit 250 > $OUT/c19/hot.log 2>&1
echo "hot rc $? $(( $(date +%s) - T0 )) s"; tail -2 $OUT/c19/hot.log
PYTHONPATH=src python3 -m phantora.profiler data/h200/coverage/ops/*.jsonl --out $OUT/c19/all_cold.jsonl \
  --time-limit 250 > $OUT/c19/cold.log 2>&1
echo "cold rc $? $(( $(date +%s) - T0 )) s"; tail -2 $OUT/c19/cold.log
