#!/bin/bash
# Twenty-ninth H200 call (session 12, issue 4; x4): the configurations whose step follows the lease's host
# contention, measured once more each on another lease (groundtruth.py, one at a time), with the host-speed
# probe before and after, so that their pooled medians rest on more leases.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")/../.."
mkdir -p $OUT/c29
source benchmarks/h200/device_call.sh
host_probes start $OUT/c29/probe.jsonl
groundtruth_runs $OUT/c29 llama_l1b_tp4 llama_l1b_tp2 llama_l1b_fsdp2_tp2 moe_ep4 llama_l1b_fsdp4_ga4 llama_tiny_1gpu nanogpt_tiny_1gpu
host_probes end $OUT/c29/probe.jsonl
cat $OUT/c29/probe.jsonl
(cd $OUT && tar czf call29.tgz c29)
echo "elapsed $(( $(date +%s) - T0 )) s"
