#!/bin/bash
# Twenty-second H200 call (session 11, issue 4; x4): TorchTitan's Llama 3 8B FSDP2 step kernel by kernel
# (its own profiler, step 8 of 9, all ranks) with NVML clocks and power beside it, to line it up with the
# simulated step (benchmarks/compare_step.py); then llama_tiny_1gpu alone, profiled with host launch times.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
cd "$(dirname "$0")"
mkdir -p $OUT/c22
python3 - <<'PY'
import os, subprocess, groundtruth
site, err = groundtruth.setup_torchtitan()
if not site:
    raise SystemExit(f"torchtitan setup: {err}")
c = dict(next(c for c in groundtruth.CONFIGS if c["name"] == "torchtitan_llama3_8b_fsdp4"))
words = groundtruth.launch_words(c)
words[words.index("--training.steps") + 1] = "9"
at = words.index("--profiling.no-enable-profiling")
words[at:at + 1] = ["--profiling.enable-profiling", "--profiling.profile_freq", "8",
                    "--profiling.save_traces_folder", "profile_traces"]
out = os.environ["OUT"] + "/c22"
env = {**os.environ, "PYTHONPATH": site}
with open(f"{out}/torchtitan.log", "w") as log:
    done = subprocess.run(["python3", f"{groundtruth.REPO}/benchmarks/h200/gpu_clocks.py", "nvml", "--out",
                           f"{out}/nvml_torchtitan.csv.gz", "--", *words],
                          cwd=groundtruth.REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=300)
print("torchtitan exit", done.returncode)
PY
grep -h "step:" $OUT/c22/torchtitan.log | tail -3
ls -la /tmp/tt_out/profile_traces/* 2>&1 | head
python3 ../workloads/profile_step.py /tmp/tt_out/profile_traces/iteration_8 --out $OUT/c22/profiles/torchtitan_llama3_8b_fsdp4
echo "torchtitan done $(( $(date +%s) - T0 )) s"
PHANTORA_BENCH_PROFILE_CPU=1 python3 profile_steps.py --out $OUT/c22 --steps 30 --only llama_tiny_1gpu 2>&1 | grep -v USDT | tail -3
python3 profile_steps.py --out $OUT/c22 --timeline --steps 30 --only llama_tiny_1gpu 2>&1 | grep -v USDT | tail -3
(cd $OUT/c22 && tar czf profiles.tgz profiles timeline && rm -rf profiles timeline)  # the files tool keeps shallow paths only
ls -la $OUT/c22
echo "elapsed $(( $(date +%s) - T0 )) s"
