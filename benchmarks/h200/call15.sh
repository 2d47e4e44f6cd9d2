#!/bin/bash
# Fifteenth H200 call (session 7, issue 4; x4): the host-bound measurements again, all in one lease
# with its host-speed index (host_probe.py, one process and four at once), so that they compare with
# each other and with the host model's calibration (call 4): the launch-bound variants
# (measure_launch_bound.py) and the tiny models' steps as call 4 took them; the library calls' host
# time of tp2, tp4 and fsdp4 (profile_steps --host-calls, as data/h200/host_calls); and the layer
# timelines with per-step scheduler counters and probes of tp2, tp4, fsdp2_tp2 and ddp2.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c15
source benchmarks/h200/device_call.sh
host_probes start $OUT/c15/probe.jsonl
grep -m1 "model name" /proc/cpuinfo > $OUT/c15/env.txt; nproc >> $OUT/c15/env.txt
python3 -c "import torch,sys; print(torch.__version__, sys.version)" >> $OUT/c15/env.txt
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/h200/measure_launch_bound.py --out $OUT/c15/launch_bound.json 2>&1 | grep -v USDT > $OUT/c15/launch_bound.log
echo "launch-bound done $(( $(date +%s) - T0 )) s"
for i in 1 2; do
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/workloads/nanogpt_train.py --layers 4 --d-model 256 --heads 4 --block 256 --batch 4 --steps 30 2>&1 | tail -1 > $OUT/c15/gt_nanogpt_tiny_$i.json
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/workloads/llama_train.py --parallel none --ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 \
    --ffn-dim 1536 --vocab 32000 --seq 512 --batch 2 --steps 30 2>&1 | tail -1 > $OUT/c15/gt_llama_tiny_$i.json
done
host_probes middle $OUT/c15/probe.jsonl
cd benchmarks/h200
python3 profile_steps.py --out $OUT/c15 --host-calls --steps 8 --only llama_l1b_tp2,llama_l1b_tp4,llama_l1b_fsdp4 2>&1 | grep -v USDT
PHANTORA_BENCH_SCHED=1 python3 profile_steps.py --out $OUT/c15 --timeline --steps 12 \
    --only llama_l1b_tp2,llama_l1b_tp4,llama_l1b_fsdp2_tp2,llama_l1b_ddp2 2>&1 | grep -v USDT
cd ../..
host_probes end $OUT/c15/probe.jsonl
cat $OUT/c15/probe.jsonl
python3 -c "
import json,glob
for f in sorted(glob.glob('$OUT/c15/gt_*.json')):
    try: d=json.load(open(f)); print(f.split('/')[-1], round(d['step_s_median']*1e3,2))
    except Exception as e: print(f, 'failed', open(f).read()[:300])
"
grep -ho '"step_s_median": [0-9.]*' $OUT/c15/timeline/*.log $OUT/c15/host_calls/*.log
(cd $OUT && tar czf call15.tgz c15)
echo "elapsed $(( $(date +%s) - T0 )) s"
