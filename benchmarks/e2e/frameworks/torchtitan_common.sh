# Sourced by torchtitan_profile.sh and torchtitan_timeline.sh: TorchTitan on the GPU machine.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# `tt_install`: TorchTitan's wheels (.whl/torchtitan/) into /tmp/tt_site and the synthetic c4 into /tmp/c4_synthetic, once.
tt_install() {
    if [[ ! -d /tmp/tt_site ]]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/tt_site .whl/torchtitan/*.whl
        python3 benchmarks/workloads/torchtitan/make_synthetic_c4.py /tmp/c4_synthetic/data.json
    fi
}

# `tt_args NAME [STEPS]` prints "WORLD ARGS..." of configs.json's configuration NAME, with STEPS training steps if given.
tt_args() {
    python3 -c "
import json, shlex, sys
c = next(c for c in json.load(open('benchmarks/e2e/frameworks/configs.json'))['configs'] if c['name'] == sys.argv[1])
a = c['args']
if sys.argv[2]:
    a[a.index('--training.steps') + 1] = sys.argv[2]
print(c['world'], shlex.join(a))" "$1" "${2:-}"
}
