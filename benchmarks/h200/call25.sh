#!/bin/bash
# Twenty-fifth H200 call (session 11, issue 4; x4): the 1.5B Llama's ops inside real steps at batch 1 and 2
# (seq 4096), op by op (measure_llama.py), for the kernel database. Batch 1 is the layer of gradient
# accumulation and of the pipeline configurations, which Phantora predicts 3-4 % long (call 23: their
# elementwise and copy kernels +6-10 % in the simulation). The two run side by side on GPUs 0 and 1.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
CUDA_VISIBLE_DEVICES=0 PH_LLAMA=2048,16,32,8,8192,128256,4096,1 PH_TAG=l1b_b1 python3 measure_llama.py 2>&1 | grep -v USDT > $OUT/l1b_b1.log &
CUDA_VISIBLE_DEVICES=1 PH_LLAMA=2048,16,32,8,8192,128256,4096,2 PH_TAG=l1b_b2 python3 measure_llama.py 2>&1 | grep -v USDT > $OUT/l1b_b2.log &
wait
tail -n 2 $OUT/l1b_b1.log $OUT/l1b_b2.log
ls -la $OUT
echo "elapsed $(( $(date +%s) - T0 )) s"
