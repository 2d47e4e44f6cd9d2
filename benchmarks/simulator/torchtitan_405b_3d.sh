#!/usr/bin/env bash
# A 512-GPU 3-D job with representative ranks: TorchTitan Llama 3.1 405B, TP 8 x PP 8 (interleaved 1F1B)
# x FSDP 8, full activation checkpointing, local batch 8 of micro-batches of 1, seq 8192, 3 steps, on 64
# simulated H100 nodes. TorchTitan unmodified (benchmarks/workloads/torchtitan/README.md: offline assets
# and the synthetic C4 in $C4_DIR). One process per pipeline stage runs (TP and FSDP fold); the launcher
# starts twice before that (docs/launcher.md, Representative ranks). Writes OUT (default
# /tmp/phantora-405b): the summary with each stage's memory, and the log.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/phantora-405b}
C4_DIR=${C4_DIR:-/tmp/c4_synthetic}
[ -f "$C4_DIR/data.json" ] || python benchmarks/workloads/torchtitan/make_synthetic_c4.py "$C4_DIR/data.json"
time python -m phantora.cli.main torchrun --gpu h100 --nnodes 64 --nproc-per-node 8 --out "$OUT" --no-progress \
  --no-trace --host-contention none \
  -m torchtitan.train --job.config_file benchmarks/workloads/torchtitan/llama3_8b.toml --job.dump_folder "$OUT/tt" \
  --model.flavor 405B --model.hf_assets_path benchmarks/workloads/torchtitan \
  --training.dataset c4_test --training.dataset_path "$C4_DIR" \
  --training.local_batch_size 8 --training.seq_len 8192 --training.steps 3 --lr_scheduler.warmup_steps 1 \
  --parallelism.data_parallel_shard_degree 8 --parallelism.tensor_parallel_degree 8 \
  --parallelism.pipeline_parallel_degree 8 --parallelism.pipeline_parallel_schedule Interleaved1F1B \
  --parallelism.pipeline_parallel_microbatch_size 1 --activation_checkpoint.mode full --compile.no-enable \
  --checkpoint.no-enable --profiling.no-enable-profiling --metrics.log_freq 1 --metrics.no-enable-tensorboard \
  --validation.no-enable 2>&1 | tee "$OUT.log"
