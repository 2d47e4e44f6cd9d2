#!/bin/bash
# Thirty-seventh H200 call (session 15, issue 4; one GPU, no x4 was lent): the two launch-bound one-GPU rows on
# the one-GPU machine type. llama_tiny_1gpu's ground truth (+10 % simulated) was all taken on x4 leases, where
# real llama/nanoGPT step ratios were 1.63-1.64; call 32's one-GPU lease ran the same llama step at 21.0 ms
# against nanoGPT's 10.0 (2.1) while its probe said uncontended. The CPU as the VM shows it, host probes, layer
# timelines with a probe after every step (PHANTORA_BENCH_SCHED=1), then both ground-truth configurations three
# times each, interleaved.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c37
source benchmarks/h200/device_call.sh
(nproc; lscpu; grep -m1 -A30 "^processor" /proc/cpuinfo) > $OUT/c37/cpu.txt 2>&1
python3 benchmarks/h200/host_probe.py --label "start" >> $OUT/c37/probe.jsonl
(cd benchmarks/h200 && PHANTORA_BENCH_SCHED=1 python3 profile_steps.py --out $OUT/c37 --timeline --steps 12 --deadline-s 120 \
    --only llama_tiny_1gpu,nanogpt_tiny_1gpu 2>&1 | grep -v USDT)
echo "timelines done $(( $(date +%s) - T0 )) s"
python3 benchmarks/h200/host_probe.py --label "middle" >> $OUT/c37/probe.jsonl
groundtruth_runs $OUT/c37 llama_tiny_1gpu nanogpt_tiny_1gpu llama_tiny_1gpu nanogpt_tiny_1gpu llama_tiny_1gpu nanogpt_tiny_1gpu
python3 benchmarks/h200/host_probe.py --label "end" >> $OUT/c37/probe.jsonl
cat $OUT/c37/probe.jsonl
grep -ho '"step_s_median": [0-9.]*' $OUT/c37/timeline/*.log
(cd $OUT && tar czf call37.tgz c37 && rm -rf c37)
echo "elapsed $(( $(date +%s) - T0 )) s"
