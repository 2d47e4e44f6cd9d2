# Sourced by the device-call scripts: `host_probes LABEL FILE` runs benchmarks/h200/host_probe.py alone,
# then in four processes at once (one per GPU), and appends the five JSON lines to FILE. Run from the
# repository root.
host_probes() {
  python3 benchmarks/h200/host_probe.py --label "$1 alone" >> "$2"
  for g in 0 1 2 3; do
    CUDA_VISIBLE_DEVICES=$g python3 benchmarks/h200/host_probe.py --label "$1 four, gpu $g" >> "$2" &
  done
  wait
}
