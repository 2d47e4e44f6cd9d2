#!/bin/bash
# First H200 call: device/context memory, the real llama run (plain + op-level profile),
# host-overhead microbenchmarks, then the kernel sweeps until the deadline.
# Usage on the GPU machine, from the repo root: bash benchmarks/h200/call1.sh  (writes under $OUT)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/log.txt
python3 measure_device.py 2>&1 | tee -a $OUT/log.txt
python3 ../workloads/llama_train.py --parallel none --ac none --dim 3072 --n-layers 28 --n-heads 24 --n-kv-heads 8 \
  --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 1 --steps 12 --tag h200_call1 2>&1 | tee $OUT/llama_plain.txt
python3 measure_llama.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
python3 measure_host.py 2>&1 | tee -a $OUT/log.txt
DEADLINE=$((T0 + ${MICRO_UNTIL:-470})) python3 measure_micro.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
python3 summarize_call.py 2>&1 | tee -a $OUT/log.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
