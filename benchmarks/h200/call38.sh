#!/bin/bash
# Thirty-eighth H200 call (session 15, issue 4; x2, no x4 was lent): do the ranks of a multi-process job run
# their hosts slower than a process alone on the same lease? On every x4 lease the real tp4 step is 1.16-1.46x
# the model's relative to llama_tiny_1gpu's on the same lease (the model charges each state right per rank:
# data/h200/call27). Three interleaved rounds of: llama_tiny alone (GPU 0), two llama_tiny processes at once
# (GPU 0 and 1), and llama_l1b_tp2 (2 ranks); every one with a host-speed probe after each step and rank
# (PHANTORA_BENCH_SCHED=1), the guest's steal time (/proc/stat) around each. Then tp2's ground-truth command
# twice.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
C=$OUT/c38
mkdir -p $C
(nproc; lscpu) > $C/cpu.txt 2>&1
LT="benchmarks/workloads/llama_train.py --parallel none --ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 --ffn-dim 1536 --vocab 32000 --seq 512 --batch 2 --steps 30"
TP2="benchmarks/workloads/llama_train.py --parallel tp --ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096 --batch 2 --steps 12"
stat() { echo "{\"label\": \"$1\", \"t\": $(date +%s.%N), \"cpu\": \"$(grep '^cpu ' /proc/stat)\"}" >> $C/stat.jsonl; }
export PHANTORA_BENCH_SCHED=1
for r in 1 2 3; do
  mkdir -p $C/r$r
  stat "r$r solo start"
  CUDA_VISIBLE_DEVICES=0 PHANTORA_BENCH_TIMELINE=$C/r$r/solo timeout 60 python3 $LT > $C/r$r/solo.log 2>&1
  stat "r$r solo end"
  CUDA_VISIBLE_DEVICES=0 PHANTORA_BENCH_TIMELINE=$C/r$r/pair0 timeout 60 python3 $LT > $C/r$r/pair0.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 PHANTORA_BENCH_TIMELINE=$C/r$r/pair1 timeout 60 python3 $LT > $C/r$r/pair1.log 2>&1 &
  wait
  stat "r$r pair end"
  PHANTORA_BENCH_TIMELINE=$C/r$r/tp2 timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=2 $TP2 > $C/r$r/tp2.log 2>&1
  stat "r$r tp2 end"
  echo "round $r: $(grep -ho '"step_s_median": [0-9.]*' $C/r$r/*.log | tr '\n' ' ') $(( $(date +%s) - T0 )) s"
done
unset PHANTORA_BENCH_SCHED
python3 benchmarks/h200/host_probe.py --label "before ground truth" >> $C/probe.jsonl
groundtruth_runs $C llama_l1b_tp2 llama_tiny_1gpu llama_l1b_tp2
python3 benchmarks/h200/host_probe.py --label "end" >> $C/probe.jsonl
cat $C/probe.jsonl
(cd $OUT && tar czf call38.tgz c38 && rm -rf c38)
echo "elapsed $(( $(date +%s) - T0 )) s"
