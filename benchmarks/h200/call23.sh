#!/bin/bash
# Twenty-third H200 call (session 11, issue 4; x4): kernel profiles of the configurations Phantora predicts
# 3-4 % long (gradient accumulation on one GPU, 1F1B and GPipe pipelines), with NVML clocks and power
# beside them, to line them up with simulated steps (benchmarks/compare_step.py).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
mkdir -p $OUT/c23
python3 gpu_clocks.py nvml --out $OUT/c23/nvml.csv.gz -- \
  python3 profile_steps.py --out $OUT/c23 --steps 8 \
    --only llama_l1b_ga4_1gpu,llama_l1b_pp2_1f1b,llama_l1b_pp4_1f1b,llama_l1b_pp4_gpipe 2>&1 | grep -v USDT | tail -5
grep -ho '"step_s_median": [0-9.]*' $OUT/c23/profiles/*.log
(cd $OUT/c23 && tar czf profiles.tgz profiles && rm -rf profiles)  # the files tool keeps shallow paths only
ls -la $OUT/c23
echo "elapsed $(( $(date +%s) - T0 )) s"
