#!/bin/bash
# Collectives on 2 and 4 GPUs of one machine, for the network model (benchmarks/collectives/fit.py) and the
# compute/communication sharing model.
#
#     benchmarks/common/run_subject.sh collectives WHAT
#
# WHAT:
#   overlap            compute kernels beside all-gather / reduce-scatter / all-reduce on 2 and on 4 GPUs, as many of
#                      those as the machine has (measure_overlap.py)
#   nccl_isolated      each collective alone, 64 KiB to 1 GiB, on every GPU of the machine (measure_nccl.py)
#   nccl_back_to_back  the same, calls issued back to back as nccl-tests times them
#
# data/$GPU/collectives/nccl/ came with the reference dev set (its meta.json), taken by a script that is not here;
# nccl_isolated/ and nccl_back_to_back/ say how it compares with each way of timing.
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: collectives/measure.sh WHAT (see its header)}
case $what in
  overlap)
    dir=$(leaf collectives overlap)
    gpus=$(nvidia-smi -L | wc -l)
    for w in 2 4; do
      (( w <= gpus )) || continue
      devices=$(seq -s, 0 $((w - 1)))
      CUDA_VISIBLE_DEVICES=$devices python3 -m torch.distributed.run --standalone --nproc_per_node=$w \
          -m benchmarks.collectives.measure_overlap --out "$dir/overlap_$w.json" > "$dir/overlap_$w.log" 2>&1
    done
    meta "$dir" benchmarks/collectives/measure_overlap.py "--out overlap_W.json (W = 2, 4 up to $gpus)" ;;
  nccl_isolated|nccl_back_to_back)
    dir=$(leaf collectives "$what")
    flag=$([[ $what == nccl_back_to_back ]] && echo --back-to-back || true)
    python3 -m torch.distributed.run --standalone --nproc_per_node="$(nvidia-smi -L | wc -l)" \
        -m benchmarks.collectives.measure_nccl --out "$dir" $flag > "$dir/log.txt" 2>&1 ;;
  *) echo "collectives: unknown WHAT $what (see benchmarks/collectives/measure.sh)" >&2; exit 2 ;;
esac
