#!/bin/bash
# Whole training steps on real GPUs: the accuracy benchmark's ground truth and what explains it.
#
#     benchmarks/common/run_subject.sh e2e WHAT [CONFIGS]
#
# WHAT:
#   groundtruth [CONFIGS]   every configuration of benchmarks/e2e/configs.json (or the comma-separated CONFIGS), each
#                           alone on the machine as a user runs it (groundtruth.py); then, here:
#                           python -m benchmarks.e2e.collect import LEASE/RUN $OUT/.../groundtruth.tar.gz [--repeat]
#   timelines CONFIGS       layer-by-layer host and GPU timelines of the configurations' steps (profile_steps.py
#                           --timeline, with a host-speed probe after every step: PHANTORA_BENCH_SCHED=1)
#   step_profiles CONFIGS   one step of each configuration under the profiler, kernel by kernel (profile_steps.py)
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: e2e/measure.sh WHAT [CONFIGS] (see its header)}
case $what in
  groundtruth)
    dir=$(leaf e2e groundtruth)
    only=${2:+--only $2}
    python3 -m benchmarks.e2e.groundtruth --out "$dir" $only --deadline-s "${DEADLINE_S:-540}" 2>&1 | tee "$dir/runner.log"
    meta "$dir" benchmarks/e2e/groundtruth.py $only ;;
  timelines)
    dir=$(leaf e2e timelines)
    PHANTORA_BENCH_SCHED=1 python3 -m benchmarks.e2e.profile_steps --out "$dir" --timeline --steps 12 \
        --only "${2:?timelines CONFIGS}" 2>&1 | grep -v USDT
    meta "$dir" benchmarks/e2e/profile_steps.py --timeline --steps 12 --only "$2" ;;
  step_profiles)
    dir=$(leaf e2e step_profiles)
    PHANTORA_BENCH_PROFILE_CPU=1 python3 -m benchmarks.e2e.profile_steps --out "$dir" --steps 6 \
        --only "${2:?step_profiles CONFIGS}" 2>&1 | grep -v USDT
    meta "$dir" benchmarks/e2e/profile_steps.py --steps 6 --only "$2" ;;
  *) echo "e2e: unknown WHAT $what (see benchmarks/e2e/measure.sh)" >&2; exit 2 ;;
esac
