#!/usr/bin/env bash
# Where framework programs spend their host time in Python, on a real GPU machine: each configuration of
# benchmarks/host/python_profiles.json named (all if none) runs plainly for its steps (its step times), then under
# benchmarks/host/profile_python.py (cProfile on every rank over the steps after the 4th, the autograd engine on the
# calling thread, a host-speed probe after every profiled step). Writes <name>.log, <name>.profiled.log,
# <name>.profiled.rank<R>.pstats and <name>.profiled.rank<R>.json under $WORK and bundles them into $BUNDLE.
# With PROFILE_ALTERNATE=1, each runs once instead, 30 steps profiled every other step after the 4th (what profiling
# costs in situ: profile_python.py), into <name>.alternate.rank<R>.{pstats,json} and <name>.alternate.log.
# The configurations are smaller than the framework benchmark's rows (benchmarks/e2e/frameworks/configs.json), so
# that none of those held-out rows is read. Needs the frameworks' wheels (benchmarks/e2e/frameworks/README.md).
#     [WORK=DIR] [BUNDLE=FILE.tar.gz] [PROFILE_ALTERNATE=1] bash benchmarks/host/python_profiles.sh [NAME ...]
set -u
work=${WORK:-/tmp/python-profiles}
mkdir -p "$work"
python3 -m benchmarks.common.env "$work" --script benchmarks/host/python_profiles.sh --argv "$*" > /dev/null
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$work/gpus.csv"
lscpu > "$work/lscpu.txt"
python3 -c "
import importlib.metadata as m
def version(name):  # '-' for a framework this machine lacks
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return '-'
print(' '.join(f'{n} {version(n)}' for n in ('torch', 'transformers', 'deepspeed', 'megatron-core')))" > "$work/versions.txt" 2>&1
configs=benchmarks/host/python_profiles.json
field() {  # name key: one field of a configuration, its words on one line
    python3 -c "import json, sys; c = {c['name']: c for c in json.load(open('$configs'))['configs']}[sys.argv[1]]; \
v = c.get(sys.argv[2], ''); print(' '.join(map(str, v)) if isinstance(v, list) else v)" "$1" "$2"
}
steps=$(python3 -c "import json; print(json.load(open('$configs'))['steps'])")
run() {  # name
    local name=$1 world script flag args
    world=$(field "$name" world); script=$(field "$name" script); flag=$(field "$name" steps_flag)
    read -r -a args <<< "$(field "$name" args)"
    local launch=(env CUDA_VISIBLE_DEVICES=0 python3) target=("$script")
    if (( world > 1 )); then launch=(torchrun --standalone --nproc-per-node "$world"); fi
    # a module's program (TorchTitan's `-m torchtitan.train`) with TorchTitan's wheels ahead on its path
    if [[ $(field "$name" module) == True ]]; then
        target=(-m "$script")
        launch=(env "PYTHONPATH=/tmp/tt_site:${PYTHONPATH:-}" "${launch[@]}")
        if [[ ! -d /tmp/tt_site ]]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tt_site .whl/torchtitan/*.whl
            python3 benchmarks/workloads/torchtitan/make_synthetic_c4.py /tmp/c4_synthetic/data.json
        fi
    fi
    echo "== $name: ${launch[*]} ${target[*]} ${args[*]}"
    if [[ ${PROFILE_ALTERNATE:-} == 1 ]]; then
        timeout 240 "${launch[@]}" -m benchmarks.host.profile_python "$work/$name.alternate" "${target[@]}" "${args[@]}" \
            "$flag" 30 > "$work/$name.alternate.log" 2>&1 < /dev/null
        echo "   alternate: exit $?"
        if [[ -n ${BUNDLE:-} ]]; then tar czf "$BUNDLE" -C "$work" .; fi
        return
    fi
    timeout 120 "${launch[@]}" "${target[@]}" "${args[@]}" "$flag" "$steps" > "$work/$name.log" 2>&1 < /dev/null
    echo "   exit $?; $(grep -c '^step \|iteration ' "$work/$name.log") step lines"
    timeout 150 "${launch[@]}" -m benchmarks.host.profile_python "$work/$name.profiled" "${target[@]}" "${args[@]}" \
        "$flag" "$steps" > "$work/$name.profiled.log" 2>&1 < /dev/null
    echo "   profiled: exit $?; $(grep -c '^step \|iteration ' "$work/$name.profiled.log") step lines"
    if [[ -n ${BUNDLE:-} ]]; then tar czf "$BUNDLE" -C "$work" .; fi
}
names=("$@")
(( ${#names[@]} )) || mapfile -t names < <(python3 -c "import json; [print(c['name']) for c in json.load(open('$configs'))['configs']]")
for name in "${names[@]}"; do
    run "$name"
done
