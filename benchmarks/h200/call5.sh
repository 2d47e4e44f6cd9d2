#!/bin/bash
# Fifth H200 call (issue 4, host model): is the DataLoader's extra forward time in call 4 real?
# The nanoGPT variants interleaved and repeated (call 4 ran them once each, in a fixed order), a
# fixed pinned batch copied each step and workers without pinned memory to take the loader apart,
# and the two launch-bound ground-truth commands twice more.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
ORDER=nano_noloader,nano_script,nano_pinned,nano_w2_nopin,nano_w0,llama_script,nano_noloader,nano_script,nano_pinned,nano_w2_nopin,llama_script,llama_noamp,nano_noloader,nano_script
python3 benchmarks/h200/measure_launch_bound.py --only $ORDER --no-extras --out $OUT/launch_bound_order.json 2>&1 | grep -v USDT | tee $OUT/log.txt
for i in 1 2; do
  python3 benchmarks/workloads/nanogpt_train.py --layers 4 --d-model 256 --heads 4 --block 256 --batch 4 --steps 30 2>&1 | tail -1 > $OUT/gt_nanogpt_tiny_$i.json
  python3 benchmarks/workloads/llama_train.py --parallel none --ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 \
    --ffn-dim 1536 --vocab 32000 --seq 512 --batch 2 --steps 30 2>&1 | tail -1 > $OUT/gt_llama_tiny_$i.json
done
python3 -c "
import json,glob
for f in sorted(glob.glob('$OUT/gt_*.json')):
    try: d=json.load(open(f)); print(f.split('/')[-1], round(d['step_s_median']*1e3,2), [round(x*1e3,1) for x in d['step_s_all'][3:]])
    except Exception as e: print(f, 'failed', open(f).read()[:300])
"
echo "elapsed $(( $(date +%s) - T0 )) s"
