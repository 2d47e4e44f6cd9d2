#!/usr/bin/env bash
# Kernel-level timelines of TorchTitan configurations of configs.json on real GPUs: each runs 7 steps with
# TorchTitan's own profiler on step 6 (after 3 warm-up steps), and the Chrome traces of ranks 0 and 1 (or those RANKS names) are kept
# gzipped as $OUT/<name>.rank<R>.trace.json.gz (the device tool returns at most 8 files of 16 MiB); the log is
# /tmp/<name>.profile.log, its step lines printed.
#     bash benchmarks/e2e/frameworks/torchtitan_profile.sh NAME [NAME ...]
# Needs the TorchTitan wheels in .whl/torchtitan/ (groundtruth.sh's header). Compare with a simulated trace:
# benchmarks/e2e/compare_timeline.py.
set -u
out=${OUT:-/tmp/torchtitan-profiles}
mkdir -p "$out"
source "$(dirname "$0")/torchtitan_common.sh"
tt_install
for name in "$@"; do
    args=$(tt_args "$name" 7)
    world=${args%% *}
    dump=/tmp/tt_profile_$name
    echo "== $name"
    PYTHONPATH=/tmp/tt_site:${PYTHONPATH:-} timeout 240 bash -c "torchrun --standalone --nproc-per-node $world -m torchtitan.train ${args#* } \
        --job.dump_folder $dump --profiling.enable_profiling --profiling.profile_freq 6 --profiling.profiler_warmup 3 \
        --profiling.profiler_active 1" > "/tmp/$name.profile.log" 2>&1 < /dev/null
    echo "   exit $?"; grep -a "step:" "/tmp/$name.profile.log" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 2
    for rank in ${RANKS:-0 1}; do
        trace=$(find $dump -name "rank${rank}_trace.json" -path "*iteration_6*" | head -1)
        [[ -n $trace ]] && gzip -9 -c "$trace" > "$out/$name.rank$rank.trace.json.gz" && ls -la "$out/$name.rank$rank.trace.json.gz"
    done
done
