#!/usr/bin/env bash
# Does a rank's host slow down when more busy processes share its machine? The framework configurations named run
# (benchmarks/e2e/frameworks/groundtruth.sh with PROBE_STEPS=1: a host-speed probe after each step) alone and beside
# N CPU spinners, pure-Python loops standing in for the main threads of more ranks on the same machine (a 4-GPU job's
# two more ranks, and their NCCL proxy threads). Each level's logs go to $OUT/spinners<N>/, beside lscpu.txt.
# A level named again runs again into spinners<N>.2/, .3/ (interleave them: the VMs' hosts drift within minutes).
# Copy them to data/<gpu>/host/host_load/.
#     [OUT=DIR] [SPINNERS="0 4 0 4 0 4"] bash benchmarks/host/host_load.sh NAME ...
set -u
out=${OUT:-/tmp/host-load-out}
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
nproc > "$out/nproc.txt"
for n in ${SPINNERS:-0 4 0 4 0 4}; do
    pids=()
    for _ in $(seq 1 "$n"); do
        python3 -c 'while True: pass' &
        pids+=($!)
    done
    level="$out/spinners$n" k=1
    while [[ -d $level ]]; do k=$((k + 1)) level="$out/spinners$n.$k"; done  # a level run again keeps each run
    OUT=$level PROBE_STEPS=1 bash benchmarks/e2e/frameworks/groundtruth.sh "$@"
    for pid in "${pids[@]}"; do kill "$pid"; done
    wait "${pids[@]}" 2>/dev/null
done
