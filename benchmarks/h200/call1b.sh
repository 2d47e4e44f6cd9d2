#!/bin/bash
# Second half of call 1 (re-run after a parser fix): llama op-level profile and the kernel sweeps.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
python3 measure_llama.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
DEADLINE=$((T0 + ${MICRO_UNTIL:-470})) python3 measure_micro.py 2>&1 | grep -v USDT | tee -a $OUT/log.txt
python3 summarize_call.py 2>&1 | tee -a $OUT/log.txt
echo "elapsed $(( $(date +%s) - T0 )) s"
