#!/usr/bin/env bash
# Kernel-level timelines of configurations of configs.json on real GPUs, any framework: each runs under
# profile_program.py (PyTorch's profiler, stepped at every optimizer step), which keeps step 8's Chrome trace
# (after 5 skipped and 2 warm-up steps) of ranks 0 and 1 (or those RANKS names) as $OUT/<name>.rank<R>.trace.json.gz; the log is
# $OUT/<name>.profile.log. Needs the frameworks' wheels (groundtruth.sh's header). Compare with a simulated trace:
# benchmarks/e2e/compare_step.py.
#     [OUT=DIR] [TIMEOUT_S=240] [RANKS="0 1"] bash benchmarks/e2e/frameworks/profile.sh NAME [NAME ...]
set -u
out=${OUT:-/tmp/framework-profiles}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for name in "$@"; do
    command=$(python3 - "$name" "$(echo ${RANKS:-0 1} | tr ' ' ,)" <<'PY'
import json, shlex, sys
c = next(c for c in json.load(open("benchmarks/e2e/frameworks/configs.json"))["configs"] if c["name"] == sys.argv[1])
env = " ".join(f"{k}={shlex.quote(v)}" for k, v in c.get("env", {}).items())
print(f"env {env} torchrun --standalone --nproc-per-node {c['world']} -m benchmarks.e2e.frameworks.profile_program "
      f"--out /tmp/profile_{c['name']} --ranks {sys.argv[2]} -- {shlex.join([c['script'], *c['args']])}")
PY
)
    echo "== $name: $command"
    timeout "${TIMEOUT_S:-240}" bash -c "$command" > "$out/$name.profile.log" 2>&1 < /dev/null
    echo "   exit $?"; grep -a "iteration \|^step \|\"step\"" "$out/$name.profile.log" | tail -n 2 | cut -c1-300
    for rank in ${RANKS:-0 1}; do
        trace=/tmp/profile_$name/rank$rank.trace.json.gz
        [[ -f $trace ]] && cp "$trace" "$out/$name.rank$rank.trace.json.gz" && ls -la "$out/$name.rank$rank.trace.json.gz"
    done
done
