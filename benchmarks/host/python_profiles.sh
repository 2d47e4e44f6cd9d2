#!/usr/bin/env bash
# Where framework programs spend their host time in Python, on a real GPU machine: each configuration named (all
# if none) runs plainly for 18 steps (its step times), then under benchmarks/host/profile_python.py (cProfile on
# every rank over the steps after the 4th, the autograd engine on the calling thread). Writes <name>.log,
# <name>.profiled.log, <name>.profiled.rank<R>.pstats and <name>.profiled.rank<R>.json under $WORK and bundles them
# into $BUNDLE.
# The configurations are smaller than the framework benchmark's rows (benchmarks/e2e/frameworks/configs.json), so
# that none of those held-out rows is read. Needs the frameworks' wheels (benchmarks/e2e/frameworks/README.md).
#     [WORK=DIR] [BUNDLE=FILE.tar.gz] bash benchmarks/host/python_profiles.sh [NAME ...]
set -u
work=${WORK:-/tmp/python-profiles}
mkdir -p "$work"
python3 -m benchmarks.common.env "$work" --script benchmarks/host/python_profiles.sh --argv "$*" > /dev/null
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$work/gpus.csv"
lscpu > "$work/lscpu.txt"
python3 -c "import torch, transformers, deepspeed, megatron.core as m; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__, 'megatron-core', m.__version__)" > "$work/versions.txt" 2>&1
llama=(--layers 8 --hidden 1536 --heads 16 --kv-heads 8 --ffn 6144 --vocab 32000 --seq 2048 --batch 4)
gpt=(--num-layers 8 --hidden-size 1536 --num-attention-heads 16 --seq-length 2048 --vocab-size 32000 --micro-batch-size 2 --global-batch-size 8)
llama_tiny=(--layers 4 --hidden 1024 --heads 8 --kv-heads 4 --ffn 4096 --vocab 32000 --seq 1024 --batch 4)
gpt_tiny=(--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --vocab-size 32000 --micro-batch-size 2 --global-batch-size 8)
run() {  # name world steps-flag script args...
    local name=$1 world=$2 flag=$3; shift 3
    local launch=(env CUDA_VISIBLE_DEVICES=0 python3)
    if (( world > 1 )); then launch=(torchrun --standalone --nproc-per-node "$world"); fi
    echo "== $name: ${launch[*]} $*"
    timeout 120 "${launch[@]}" "$@" "$flag" 18 > "$work/$name.log" 2>&1 < /dev/null
    echo "   exit $?; $(grep -c '^step \|iteration ' "$work/$name.log") step lines"
    local script=$1; shift
    timeout 150 "${launch[@]}" -m benchmarks.host.profile_python "$work/$name.profiled" "$script" "$@" "$flag" 18 \
        > "$work/$name.profiled.log" 2>&1 < /dev/null
    echo "   profiled: exit $?; $(grep -c '^step \|iteration ' "$work/$name.profiled.log") step lines"
    if [[ -n ${BUNDLE:-} ]]; then tar czf "$BUNDLE" -C "$work" .; fi
}
declare -A configs=(
    [deepspeed_zero3_llama_small]="2 --steps examples/deepspeed_train.py ${llama[*]} --zero 3 --torch-adam"
    [megatron_tp2_gpt_small]="2 --train-iters examples/megatron_core_gpt.py ${gpt[*]} --tp 2"
    [hf_loop_llama_small]="1 --steps examples/hf_llama_loop.py ${llama[*]}"
    [deepspeed_zero3_llama_tiny]="2 --steps examples/deepspeed_train.py ${llama_tiny[*]} --zero 3 --torch-adam"
    [megatron_tp2_gpt_tiny]="2 --train-iters examples/megatron_core_gpt.py ${gpt_tiny[*]} --tp 2"
)
names=("$@")
(( ${#names[@]} )) || names=(deepspeed_zero3_llama_small megatron_tp2_gpt_small hf_loop_llama_small
                             deepspeed_zero3_llama_tiny megatron_tp2_gpt_tiny)
for name in "${names[@]}"; do
    # shellcheck disable=SC2086  # a configuration is its words
    run "$name" ${configs[$name]}
done
