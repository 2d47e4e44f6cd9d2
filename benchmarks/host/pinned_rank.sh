#!/bin/bash
# Run by `torchrun --no-python` once per rank: the rank gets its own block of this machine's vCPUs
# (data/h200/e2e/timelines/pinning/: does the slow rank of host-bound multi-GPU steps come from ranks sharing CPUs?).
n=$(getconf _NPROCESSORS_ONLN)  # not nproc: it obeys the OMP_NUM_THREADS=1 torchrun sets
per=$(( n / ${LOCAL_WORLD_SIZE:-1} )); lo=$(( LOCAL_RANK * per ))
exec taskset -c "$lo-$(( lo + per - 1 ))" python3 "$@"
