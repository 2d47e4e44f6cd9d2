#!/bin/bash
# Measure one subject on a GPU machine, from the repository root:
#
#     benchmarks/common/run_subject.sh SUBJECT WHAT [ARGS...]     # runs benchmarks/SUBJECT/measure.sh WHAT ARGS
#
# Output goes to $OUT/data/$GPU/SUBJECT/WHAT/ with a meta.json (benchmarks/common/env.py), the same tree as data/:
# copy the leaf into data/ for a first measurement, or into data/$GPU/SUBJECT/WHAT/runs/<date>-<lease>/ for a rerun
# (data/README.md). Environment: OUT (default /tmp/phantora-measure), GPU (default h200), PHANTORA_LEASE (the
# lease's name, <date>-<NN>, recorded in meta.json).
#
# The subjects' measure.sh scripts source this file for the helpers below.

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OUT=${OUT:-/tmp/phantora-measure} GPU=${GPU:-h200}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

# `leaf SUBJECT WHAT` makes and prints the output folder of one measurement.
leaf() {
  local dir="$OUT/data/$GPU/$1/$2"
  mkdir -p "$dir"
  echo "$dir"
}

# `meta DIR SCRIPT ARGS...` writes DIR/meta.json for a measurement SCRIPT ARGS took there.
meta() {
  local dir=$1 script=$2
  shift 2
  python3 -m benchmarks.common.env "$dir" --script "$script" --argv="$*" > /dev/null
}

# `host_probes LABEL FILE` runs the host-speed probe alone, then in four processes at once (one per GPU), and
# appends the five JSON lines to FILE (data/<gpu>/host/leases/: how contended the lease's hosts were).
host_probes() {
  python3 -m benchmarks.common.host_probe --label "$1 alone" >> "$2"
  local g
  for g in $(seq 0 $(( $(nvidia-smi -L | wc -l) - 1 ))); do
    CUDA_VISIBLE_DEVICES=$g python3 -m benchmarks.common.host_probe --label "$1 four, gpu $g" >> "$2" &
  done
  wait
}

# `groundtruth_runs DIR NAME...` runs each named ground-truth configuration alone on the machine
# (benchmarks/e2e/groundtruth.py), in order, into DIR/g1, DIR/g2, ..., and prints each one's result line.
groundtruth_runs() {
  local dir=$1 i=0 name
  shift
  for name in "$@"; do
    i=$((i + 1))
    python3 -m benchmarks.e2e.groundtruth --out "$dir/g$i" --only "$name" --overlap-before none --deadline-s 90 2>&1 \
        | grep -v USDT | grep -E "rc=|done|skipped" | cut -c1-200
  done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  subject=${1:?usage: benchmarks/common/run_subject.sh SUBJECT WHAT [ARGS...]}
  shift
  exec bash "benchmarks/$subject/measure.sh" "$@"
fi
