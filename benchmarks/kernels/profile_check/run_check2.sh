#!/bin/bash
# Second GPU validation call: the llama database again (run-to-run spread), --only-missing, and the on-the-fly worker after it moved to a single-threaded loop.
set -u
export PYTHONPATH=src
D=data/h200/kernels/profile_check
# (this call first ran gemm_clock_check.py: the three LM-head GEMMs from fresh processes with 0, 1 and 3 s of
# back-to-back GEMMs before measuring, through a `spin_up_s` option since removed; output in gpu_run2/gemm_clock.log)
python3 -m phantora.profiler $D/ops_llama3b_l2.jsonl --out $OUT/llama_profiler.jsonl --time-limit 60 2>&1 | grep -v "_warn_once\|UserWarning" | tee $OUT/llama_profiler.log
echo "done at ${SECONDS} s"
timeout 90 python3 benchmarks/kernels/profile_check/worker_check.py $D/ops_llama3b_l2.jsonl 2>&1 | grep -v "_warn_once\|UserWarning" | tee $OUT/worker_check.log
echo "done at ${SECONDS} s"
python3 -m phantora.profiler $D/ops_llama3b_l2.jsonl --out $OUT/llama_missing.jsonl --only-missing 2>&1 | grep -v "_warn_once\|UserWarning" | tee $OUT/llama_missing.log
echo "done at ${SECONDS} s"
