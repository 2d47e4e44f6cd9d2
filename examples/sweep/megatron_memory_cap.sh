#!/usr/bin/env bash
# The fastest Megatron-core configuration that fits a memory cap: gradient accumulation x activation
# recomputation x micro-batch size for a 1.7B-parameter GPT (8 layers, hidden 4096, 2048-token sequences) on one
# H100, with at most 48 GiB of GPU memory for the job (docs/sweep.md shows what it found).
#   pip install -e '.[megatron]'
#   bash examples/sweep/megatron_memory_cap.sh [OUT]      # 24 points; a few minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
phantora sweep --out "${1:-phantora-sweep/megatron-memory-cap}" \
  --grid recompute=none,selective,full --grid grad-accum=1,4 --grid micro-batch-size=1,2,4,8 \
  --max-memory 48 --metric 'tokens_per_s=tokens/s: ([0-9]+)' \
  -- phantora torchrun --gpu h100 --nproc-per-node 1 examples/megatron_core_gpt.py \
  --num-layers 8 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --vocab-size 32000 --train-iters 4
