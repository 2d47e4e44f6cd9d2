#!/bin/bash
# Thirty-second H200 call (session 13, issue 4; one GPU): what autocast costs the host, in situ. The host model
# charges each cast that autocast issues as a kernel op issued from Python (framework_ns included); call 5's
# interleaved runs put the real llama forward's autocast overhead at about half that. The launch-bound
# variants with and without autocast, interleaved and repeated four times on one lease
# (measure_launch_bound.py), host-speed probes before and after.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c32
python3 benchmarks/h200/host_probe.py --label "start" >> $OUT/c32/probe.jsonl
ORDER=nano_noloader,nano_noloader_noamp,llama_script,llama_noamp
ORDER=$ORDER,$ORDER,$ORDER,$ORDER
python3 benchmarks/h200/measure_launch_bound.py --only $ORDER --no-extras --out $OUT/c32/launch_bound_amp.json 2>&1 \
    | grep -v USDT | tee $OUT/c32/log.txt | cut -c1-200
python3 benchmarks/h200/host_probe.py --label "end" >> $OUT/c32/probe.jsonl
cat $OUT/c32/probe.jsonl
(cd $OUT && tar czf call32.tgz c32 && rm -rf c32)
echo "elapsed $(( $(date +%s) - T0 )) s"
