#!/bin/bash
# GPU validation of `phantora profile` (issue 4): run from the repo root on an H200, $OUT set.
# Inputs: ops recorded by `phantora run` of the llama 3B benchmark with 2 layers (ops_llama3b_l2.jsonl)
# and of examples/nanogpt_train.py (ops_nanogpt.jsonl). Outputs: kernel databases, reports, logs.
set -u
export PYTHONPATH=src
D=data/h200/kernels/profile_check
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
python3 -c "import numpy; print('numpy', numpy.__version__)" || echo "numpy: not installed"
python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" || echo "matplotlib: not installed"
python3 -c "import sys, phantora.cli.profile, phantora.profiler.run, phantora.profiler.onthefly; print('numpy/matplotlib loaded by the profile path:', sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'matplotlib'))[:5])"
} 2>&1 | tee $OUT/env.txt
python3 benchmarks/kernels/profile_check/profiler_probe.py 2>&1 | tee $OUT/probe.log
echo "probe done at ${SECONDS} s"
python3 -m phantora.profiler $D/ops_llama3b_l2.jsonl --out $OUT/llama_profiler.jsonl --time-limit 90 2>&1 | tee $OUT/llama_profiler.log
echo "done at ${SECONDS} s"
python3 -m phantora.profiler $D/ops_llama3b_l2.jsonl --out $OUT/llama_events.jsonl --timer events --limit 40 --time-limit 20 2>&1 | tee $OUT/llama_events.log
echo "done at ${SECONDS} s"
python3 -m phantora.profiler $D/ops_nanogpt.jsonl --out $OUT/nanogpt_profiler.jsonl --time-limit 35 2>&1 | tee $OUT/nanogpt_profiler.log
echo "done at ${SECONDS} s"
timeout 90 python3 benchmarks/kernels/profile_check/worker_check.py $D/ops_llama3b_l2.jsonl 2>&1 | tee $OUT/worker_check.log
echo "done at ${SECONDS} s"
