#!/bin/bash
# Kernel times on one GPU, for the kernel database and the analytic compute model (benchmarks/kernels/fit.py).
#
#     benchmarks/common/run_subject.sh kernels WHAT
#
# WHAT:
#   micro                     microbenchmark sweeps of every op family (measure_micro.py; DEADLINE: epoch seconds)
#   shapes                    layouts that change a kernel's speed for the same bytes: strided cat, narrow norms,
#                             index_put_ (measure_shapes.py; DEADLINE: epoch seconds)
#   in_step NAME SPEC         a llama's ops inside real training steps (measure_in_step.py); SPEC = PH_LLAMA's
#                             dim,layers,heads,kv_heads,ffn,vocab,seq,batch, e.g. 2048,16,32,8,8192,128256,4096,2
#   coverage_missing          the accuracy configurations' op signatures the shipped database lacks
#                             (`phantora profile` on data/$GPU/e2e/coverage/ops/, L2 evicted)
#   coverage_all              all of them, L2 evicted and warm
#   gemm_kernels              which cuBLAS kernel each expert GEMM of moe_a2a.py launches, m = 7600..8800
#   gemm_kernel_names         whether `phantora profile` names the same kernels (check_profile.py)
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: kernels/measure.sh WHAT [ARGS] (see its header)}
shift
case $what in
  micro)
    dir=$(leaf kernels micro/sweeps)
    OUT=$dir DEADLINE=${DEADLINE:-$(( $(date +%s) + 470 ))} python3 -m benchmarks.kernels.measure_micro 2>&1 \
        | grep -v USDT | tee "$dir/log.txt"
    meta "$dir" benchmarks/kernels/measure_micro.py ;;
  shapes)
    dir=$(leaf kernels micro/shape_sweeps)
    OUT=$dir DEADLINE=${DEADLINE:-$(( $(date +%s) + 330 ))} python3 -m benchmarks.kernels.measure_shapes 2>&1 \
        | grep -v USDT | tee "$dir/log.txt"
    meta "$dir" benchmarks/kernels/measure_shapes.py ;;
  in_step)
    name=${1:?in_step NAME SPEC}
    spec=${2:?in_step NAME SPEC}
    dir=$(leaf kernels "in_step/$name")
    OUT=$dir PH_LLAMA=$spec PH_TAG=$name python3 -m benchmarks.kernels.measure_in_step 2>&1 | grep -v USDT \
        | tee "$dir/log.txt"
    meta "$dir" benchmarks/kernels/measure_in_step.py "PH_LLAMA=$spec PH_TAG=$name" ;;
  coverage_missing)
    dir=$(leaf kernels micro/coverage_missing)
    CUDA_VISIBLE_DEVICES=0 python3 -m phantora.profiler data/"$GPU"/e2e/coverage/ops/*.jsonl --only-missing \
        --out "$dir/coverage_kernels.jsonl" --time-limit "${TIME_LIMIT:-450}" > "$dir/profile.log" 2>&1
    meta "$dir" "python -m phantora.profiler" "data/$GPU/e2e/coverage/ops/*.jsonl --only-missing" ;;
  coverage_all)
    dir=$(leaf kernels micro/coverage_all)
    for mode in hot cold; do
      flag=$([[ $mode == hot ]] && echo --hot || true)
      CUDA_VISIBLE_DEVICES=0 python3 -m phantora.profiler data/"$GPU"/e2e/coverage/ops/*.jsonl $flag \
          --out "$dir/all_$mode.jsonl" --time-limit 250 > "$dir/$mode.log" 2>&1
    done
    meta "$dir" "python -m phantora.profiler" "data/$GPU/e2e/coverage/ops/*.jsonl [--hot]" ;;
  gemm_kernels)
    dir=$(leaf kernels gemm_kernels)
    timeout 400 python3 -m benchmarks.host.measure_first_launch --sweep 7600 8800 --out "$dir/sweep.json" 2>&1 | tail -2
    gzip -f "$dir/sweep.json"
    meta "$dir" benchmarks/host/measure_first_launch.py --sweep 7600 8800 ;;
  gemm_kernel_names)
    dir=$(leaf kernels gemm_kernel_names)
    timeout 300 python3 -m benchmarks.kernels.check_profile "$dir" 2>&1 | tail -20
    meta "$dir" benchmarks/kernels/check_profile.py "$dir" ;;
  *) echo "kernels: unknown WHAT $what (see benchmarks/kernels/measure.sh)" >&2; exit 2 ;;
esac
