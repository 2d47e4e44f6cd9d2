#!/bin/bash
# Host (CPU) time of what a training step issues, for the host model (benchmarks/host/fit_*.py).
#
#     benchmarks/common/run_subject.sh host WHAT [ARGS]
#
# WHAT:
#   leases                   the host-speed probe alone and on every GPU at once (how contended this lease is);
#                            ARGS: a label (start, middle, end). Run it around every other measurement.
#   calls                    host cost per call of tiny ops, foreach ops, optimizers (measure_calls.py)
#   autograd_calls           the same with autograd, backward chains, autocast (measure_autograd_calls.py)
#   launch_bound             the launch-bound workloads and their variants, phase by phase (measure_launch_bound.py;
#                            ARGS go to it, e.g. --only A,B,A,B --no-extras for an interleaved rerun)
#   compiled                 the torch.compile'd launch-bound variants, phase by phase, with a host probe before and
#                            after (measure_launch_bound.py --compiled; ARGS go to it)
#   phases                   a host-bound llama step split into forward, backward, clip, optimizer (measure_phases.py)
#   library_calls CONFIGS    each library call's exclusive host time in the ground-truth commands (profile_steps.py
#                            --host-calls; CONFIGS: comma-separated configuration names)
#   fsdp                     FSDP2's calls in micro-steps that keep their gradients, 1.5B llama on 2 GPUs
#   moe                      a MoE layer's calls one by one on 2+ GPUs (measure_moe.py)
#   all_to_all               an all-to-all's host cost at each API layer, even and uneven, on 4 and 2 ranks
#   collective_calls         one c10d collective call's host cost, tight and in situ, on every GPU of the machine
#                            (measure_collective_calls.py)
#   cpu_tensor_ops           host time of tensor ops on CPU tensors (collate, masks, pin_memory) by the bytes they
#                            move, 1 thread and the default (measure_cpu_tensor_ops.py)
#   marks                    what a timeline mark costs in a tight loop (measure_marks.py)
#   first_launch TIMELINE    moe_ep4's expert row counts replayed in fresh processes, ranks 0-3 (TIMELINE: a moe_ep4
#                            layer timeline with expert_rows notes, data/$GPU/e2e/timelines/runs/<lease>/moe_ep4)
source benchmarks/common/run_subject.sh
set -euo pipefail
what=${1:?usage: host/measure.sh WHAT [ARGS] (see its header)}
shift
L1B="--ac none --dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096"
case $what in
  leases)
    dir=$(leaf host leases)
    host_probes "${1:-probe}" "$dir/probe.jsonl"
    { nproc; lscpu; } > "$dir/cpu.txt"
    meta "$dir" benchmarks/common/host_probe.py --label "${1:-probe}" ;;
  calls|autograd_calls)
    script=$([[ $what == calls ]] && echo measure_calls || echo measure_autograd_calls)
    dir=$(leaf host "calls/$([[ $what == calls ]] && echo ops || echo autograd)")
    OUT=$dir python3 -m "benchmarks.host.$script" 2>&1 | tee "$dir/log.txt"
    meta "$dir" "benchmarks/host/$script.py" ;;
  launch_bound)
    dir=$(leaf host launch_bound)
    python3 -m benchmarks.host.measure_launch_bound --out "$dir/launch_bound.json" "$@" 2>&1 | grep -v USDT \
        | tee "$dir/launch_bound.log"
    meta "$dir" benchmarks/host/measure_launch_bound.py "$@" ;;
  compiled)
    dir=$(leaf host compiled)
    host_probes "compiled start" "$dir/lease_probes.jsonl"
    python3 -m benchmarks.host.measure_launch_bound --compiled --out "$dir/launch_bound.json" "$@" 2>&1 \
        | grep -v USDT | tee "$dir/log.txt"
    host_probes "compiled end" "$dir/lease_probes.jsonl"
    meta "$dir" benchmarks/host/measure_launch_bound.py --compiled "$@" ;;
  phases)
    dir=$(leaf host phases)
    OUT=$dir python3 -m benchmarks.host.measure_phases 2>&1 | grep -v USDT | tee "$dir/log.txt"
    meta "$dir" benchmarks/host/measure_phases.py ;;
  library_calls)
    configs=${1:?library_calls CONFIGS}
    dir=$(leaf host calls/library)
    python3 -m benchmarks.e2e.profile_steps --out "$dir/run" --host-calls --steps 8 --only "$configs" 2>&1 | grep -v USDT
    mv "$dir"/run/host_calls/* "$dir"/ && rm -rf "$dir/run"
    meta "$dir" benchmarks/e2e/profile_steps.py --host-calls --steps 8 --only "$configs" ;;
  fsdp)
    dir=$(leaf host fsdp)
    for accum in 4 1; do
      PHANTORA_BENCH_HOST_CALLS=$dir/fsdp2_ga$accum timeout 200 python3 -m torch.distributed.run --standalone \
          --nproc_per_node=2 benchmarks/workloads/llama_train.py --parallel fsdp $L1B --batch 1 --steps 8 \
          --grad-accum $accum > "$dir/fsdp2_ga$accum.log" 2>&1
    done
    meta "$dir" benchmarks/workloads/llama_train.py "--parallel fsdp $L1B --batch 1 --steps 8 --grad-accum 4|1" ;;
  moe)
    dir=$(leaf host moe)
    OUT=$dir python3 -m torch.distributed.run --standalone --nproc_per_node="${WORLD:-2}" -m benchmarks.host.measure_moe \
        > "$dir/moe_host.log" 2>&1
    meta "$dir" benchmarks/host/measure_moe.py ;;
  all_to_all)
    dir=$(leaf host all_to_all)
    for w in 4 2; do
      mkdir -p "$dir/w$w"
      OUT=$dir/w$w python3 -m torch.distributed.run --standalone --nproc_per_node=$w -m benchmarks.host.measure_all_to_all \
          2>&1 | grep -v -i "warn\|USDT" | tail -12
      mv "$dir/w$w/a2a_host.json" "$dir/a2a_host_w$w.json" && rmdir "$dir/w$w"
    done
    meta "$dir" benchmarks/host/measure_all_to_all.py "(4 and 2 ranks)" ;;
  collective_calls)
    dir=$(leaf host collective_calls)
    w=$(nvidia-smi -L | wc -l)
    OUT=$dir python3 -m torch.distributed.run --standalone --nproc_per_node=$w -m benchmarks.host.measure_collective_calls \
        2>&1 | grep -v -i "warn\|USDT" | tee "$dir/log.txt"
    meta "$dir" benchmarks/host/measure_collective_calls.py "($w ranks)" ;;
  cpu_tensor_ops)
    dir=$(leaf host cpu_tensor_ops)
    OUT=$dir python3 -m benchmarks.host.measure_cpu_tensor_ops 2>&1 | grep -v USDT | tee "$dir/log.txt"
    { nproc; lscpu; } > "$dir/cpu.txt"
    meta "$dir" benchmarks/host/measure_cpu_tensor_ops.py ;;
  marks)
    dir=$(leaf host marks/event_record)
    python3 -m benchmarks.host.measure_marks > "$dir/event_record.jsonl"
    meta "$dir" benchmarks/host/measure_marks.py ;;
  first_launch)
    timeline=${1:?first_launch TIMELINE}
    dir=$(leaf host first_launch)
    for r in 0 1 2 3; do
      timeout 120 python3 -m benchmarks.host.measure_first_launch --replay "$timeline" --rank $r \
          --out "$dir/replay_lazy_r$r.json" 2>&1 | tail -1
    done
    meta "$dir" benchmarks/host/measure_first_launch.py --replay "$timeline" --rank R ;;
  *) echo "host: unknown WHAT $what (see benchmarks/host/measure.sh)" >&2; exit 2 ;;
esac
