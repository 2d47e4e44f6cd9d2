#!/bin/bash
# Sixteenth H200 call (session 7, issue 4; x4): kernel-level profiles of one step of the tensor-parallel
# configurations and moe_ep4 (profile_steps.py, as data/h200/step_profiles), with the host-speed index
# before and after: on an uncontended host tp4's GPU runs 6 ms per layer in the forward, which its kernels
# as simulated do not explain.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
mkdir -p $OUT/c16
python3 host_probe.py --label before >> $OUT/c16/probe.jsonl
python3 profile_steps.py --out $OUT/c16 --steps 6 --only llama_l1b_tp4,llama_l1b_tp2,llama_l1b_fsdp2_tp2,moe_ep4 2>&1 | grep -v USDT
python3 host_probe.py --label after >> $OUT/c16/probe.jsonl
cat $OUT/c16/probe.jsonl
grep -ho '"step_s_median": [0-9.]*' $OUT/c16/profiles/*.log
(cd $OUT && tar czf call16.tgz c16)
echo "elapsed $(( $(date +%s) - T0 )) s"
