#!/bin/bash
# Seventeenth H200 call (session 7, issue 4): the host model's calibration measurements again, each
# bracketed by the host-speed probe (host_probe.py), twice, for a refit on uncontended host time: the
# per-op microbenchmarks (measure_host.py, as call 1) and the launch-bound variants (measure_launch_bound.py,
# as call 4). One process on GPU 0, nothing else running.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c17
export CUDA_VISIBLE_DEVICES=0
probe() { python3 benchmarks/h200/host_probe.py --label "$1" >> $OUT/c17/probe.jsonl; }
for round in 1 2; do
  probe "before host $round"
  (cd benchmarks/h200 && OUT=$OUT/c17/host$round python3 measure_host.py > $OUT/c17/host$round.log 2>&1) || mkdir -p $OUT/c17/host$round
  probe "before launch-bound $round"
  python3 benchmarks/h200/measure_launch_bound.py --out $OUT/c17/launch_bound$round.json 2>&1 | grep -v USDT > $OUT/c17/launch_bound$round.log
  probe "after launch-bound $round"
  echo "round $round done $(( $(date +%s) - T0 )) s"
done
cat $OUT/c17/probe.jsonl
ls -R $OUT/c17 | head -20
(cd $OUT && tar czf call17.tgz c17)
echo "elapsed $(( $(date +%s) - T0 )) s"
