#!/bin/bash
# Eighth H200 call (session 5, issue 4): the host-bound TP configurations measured again, each with
# a host-speed probe on the same machine just before it (the ground-truth command of llama_tiny_1gpu,
# a host-bound step: its step time over the simulated one is this host's speed against the host
# model's), and the unprofiled layer timeline of DDP on 4 GPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
for round in 1 2; do
  for c in llama_l1b_tp2 llama_l1b_tp4 llama_l1b_fsdp2_tp2; do
    python3 groundtruth.py --out $OUT/r$round/$c --only llama_tiny_1gpu,$c --overlap-before none --deadline-s 200 2>&1 \
        | grep -v USDT | cut -c1-220
  done
done
python3 profile_steps.py --out $OUT/tl --timeline --steps 8 --only llama_l1b_ddp4 2>&1 | grep -v USDT
(cd $OUT && tar czf call8.tgz r1 r2 tl)
echo "elapsed $(( $(date +%s) - T0 )) s"
