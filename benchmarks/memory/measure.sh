#!/bin/bash
# GPU memory as the caching allocator and the CUDA context use it, for the memory model.
#
#     benchmarks/common/run_subject.sh memory WHAT [CONFIGS]
#
# WHAT:
#   allocator_probe   the caching allocator's decisions in small scenarios (allocator_probe.py), one JSON
#   context           device properties, mem_get_info around the CUDA context, copy and GEMM ceilings (device_context.py)
#   history CONFIGS   the allocator's segments mapped per step in the ground-truth commands (profile_steps.py
#                     --memory-history; CONFIGS comma-separated)
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: memory/measure.sh WHAT [CONFIGS] (see its header)}
case $what in
  allocator_probe)
    dir=$(leaf memory .)
    python3 -m benchmarks.memory.allocator_probe --out "$dir/allocator_probe.json"
    meta "$dir" benchmarks/memory/allocator_probe.py --out allocator_probe.json ;;
  context)
    dir=$(leaf memory context)
    OUT=$dir python3 -m benchmarks.memory.device_context 2>&1 | tee "$dir/log.txt"
    meta "$dir" benchmarks/memory/device_context.py ;;
  history)
    dir=$(leaf memory history)
    python3 -m benchmarks.e2e.profile_steps --out "$dir/run" --memory-history --steps 12 --only "${2:?history CONFIGS}" \
        2>&1 | grep -v USDT
    meta "$dir" benchmarks/e2e/profile_steps.py --memory-history --steps 12 --only "$2" ;;
  *) echo "memory: unknown WHAT $what (see benchmarks/memory/measure.sh)" >&2; exit 2 ;;
esac
