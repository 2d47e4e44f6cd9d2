#!/usr/bin/env bash
# Layer timelines of TorchTitan configurations of configs.json on real GPUs, every rank, without a profiler: each runs
# 10 steps under benchmarks/workloads/torchtitan/timeline_train.py (TorchTitan's trainer with
# benchmarks/workloads/timeline.py's marks), steps 4-10 recorded, each followed by two host-speed probes
# (PHANTORA_BENCH_SCHED=1); rank R's file is $OUT/<name>/rank<R>.json, the log $OUT/<name>/log.txt.
#     bash benchmarks/e2e/frameworks/torchtitan_timeline.sh NAME [NAME ...]
# Needs the TorchTitan wheels in .whl/torchtitan/ (groundtruth.sh's header). Simulate the same with
# PHANTORA_BENCH_TIMELINE=DIR phantora torchrun ... -m benchmarks.workloads.torchtitan.timeline_train <the same args>,
# and compare with benchmarks/e2e/compare_timeline.py.
set -u
out=${OUT:-/tmp/torchtitan-timelines}
source "$(dirname "$0")/torchtitan_common.sh"
tt_install
for name in "$@"; do
    args=$(tt_args "$name")
    world=${args%% *}
    mkdir -p "$out/$name"
    echo "== $name"
    PHANTORA_BENCH_TIMELINE="$out/$name" PHANTORA_BENCH_SCHED=1 PYTHONPATH=/tmp/tt_site:$PWD:${PYTHONPATH:-} timeout 300 bash -c \
        "torchrun --standalone --nproc-per-node $world -m benchmarks.workloads.torchtitan.timeline_train ${args#* }" \
        > "$out/$name/log.txt" 2>&1 < /dev/null
    echo "   exit $?"; grep -a "step:" "$out/$name/log.txt" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 3
done
