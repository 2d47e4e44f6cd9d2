#!/bin/bash
# Second H200 call: host-bound llama (same op sequence, tiny shapes) for the host model; a
# held-out workload (llama 1B, batch 2) measured plain and op by op; H2D/D2H copies and
# fp32->bf16 casts; more host-cost cases.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
PH_LLAMA=384,28,24,8,512,1024,64,1 PH_PLAIN=15 PH_PROF=0 PH_TAG=tiny python3 measure_llama.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
python3 ../workloads/llama_train.py --parallel none --ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 \
  --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 2 --steps 10 --tag l1b_b2 2>&1 | tee $OUT/l1b_plain.txt
PH_LLAMA=2048,16,32,8,8192,128256,4096,2 PH_PLAIN=4 PH_PROF=2 PH_TAG=l1b python3 measure_llama.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
python3 measure_host2.py 2>&1 | tee -a $OUT/log.txt
PH_FAMILIES=cast2,transfer PH_SUFFIX=_call2 DEADLINE=$((T0 + 400)) python3 measure_micro.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
python3 summarize_call.py 2>&1 | tail -12
echo "elapsed $(( $(date +%s) - T0 )) s"
