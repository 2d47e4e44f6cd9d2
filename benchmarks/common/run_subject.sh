# Sourced by the device-call scripts (run from the repository root).
#
# `host_probes LABEL FILE` runs benchmarks/common/host_probe.py alone, then in four processes at once (one per
# GPU), and appends the five JSON lines to FILE.
host_probes() {
  python3 benchmarks/common/host_probe.py --label "$1 alone" >> "$2"
  for g in 0 1 2 3; do
    CUDA_VISIBLE_DEVICES=$g python3 benchmarks/common/host_probe.py --label "$1 four, gpu $g" >> "$2" &
  done
  wait
}

# `groundtruth_runs DIR NAME...` runs each named ground-truth configuration alone on the machine
# (benchmarks/e2e/groundtruth.py), in order, into DIR/g1, DIR/g2, ..., and prints each one's result line.
groundtruth_runs() {
  local dir=$1 i=0 name
  shift
  for name in "$@"; do
    i=$((i + 1))
    (cd benchmarks/h200 && python3 groundtruth.py --out "$dir/g$i" --only "$name" --overlap-before none --deadline-s 90 2>&1 \
        | grep -v USDT | grep -E "rc=|done|skipped" | cut -c1-200)
  done
}

# `call_setup N` opens device call N's script (run from the repository root): NCCL without NVLink multicast
# (KINDS.md), unbuffered Python, T0, the output folder C=$OUT/cN, and a host probe at the start in C/probe.jsonl.
call_setup() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
  T0=$(date +%s)
  C=$OUT/c$1
  mkdir -p "$C"
  python3 benchmarks/common/host_probe.py --label "start" >> "$C/probe.jsonl"
}
