#!/bin/bash
# Collectives on 2 and 4 GPUs of one machine, for the network model (benchmarks/collectives/fit.py) and the
# compute/communication sharing model.
#
#     benchmarks/common/run_subject.sh collectives WHAT
#
# WHAT:
#   overlap    compute kernels beside all-gather / reduce-scatter / all-reduce on 2 and 4 GPUs (measure_overlap.py)
#
# data/$GPU/collectives/nccl/ came with the reference dev set (its meta.json); no script here retakes it.
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: collectives/measure.sh WHAT (see its header)}
case $what in
  overlap)
    dir=$(leaf collectives overlap)
    for w in 2 4; do
      devices=$([[ $w == 2 ]] && echo 0,1 || echo 0,1,2,3)
      CUDA_VISIBLE_DEVICES=$devices python3 -m torch.distributed.run --standalone --nproc_per_node=$w \
          -m benchmarks.collectives.measure_overlap --out "$dir/overlap_$w.json" > "$dir/overlap_$w.log" 2>&1
    done
    meta "$dir" benchmarks/collectives/measure_overlap.py "--out overlap_W.json (W = 2, 4)" ;;
  *) echo "collectives: unknown WHAT $what (see benchmarks/collectives/measure.sh)" >&2; exit 2 ;;
esac
