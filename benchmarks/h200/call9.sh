#!/bin/bash
# Ninth H200 call (session 5, issue 4): tensor-parallel steps with and without each rank pinned to
# its own vCPUs (pinned_rank.sh), alternating, with layer timelines: is the straggler rank's host
# time (1.3-1.6x the others') an artefact of ranks sharing CPUs?
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
mkdir -p $OUT/tl
lscpu | grep -E "^CPU\(s\)|Thread|Core|Socket|NUMA node" > $OUT/lscpu.txt
ARGS="--ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 2 --steps 12"
for round in 1 2; do
  for world in 4 2; do
    for mode in free pinned; do
      name=tp${world}_${mode}_$round
      if [ $mode = pinned ]; then launch="--no-python benchmarks/h200/pinned_rank.sh"; else launch=""; fi
      PHANTORA_BENCH_TIMELINE=$OUT/tl/$name python3 -m torch.distributed.run --standalone --nproc_per_node=$world $launch \
          benchmarks/workloads/llama_train.py --parallel tp $ARGS > $OUT/tl/$name.log 2>&1
      echo "$name $(grep -o '"step_s_median": [0-9.]*' $OUT/tl/$name.log)"
    done
  done
done
(cd $OUT && tar czf call9.tgz tl lscpu.txt)
