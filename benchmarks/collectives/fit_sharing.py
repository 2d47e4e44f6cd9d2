"""Fit the compute/communication sharing model (models/interference.py `GpuSharing`, specs/<gpu>/sharing.json)
on real training steps of the fitting set and on NCCL's own kernels.

    python -m benchmarks.collectives.fit_sharing [--specs DIR] [--keep DIR]

Real side (every configuration is in the fitting set of benchmarks/e2e/split.toml):
- data/h200/e2e/step_profiles/profiles/<config>/rank{R}.json.gz: one profiled step of every rank, kernel by kernel
  (FSDP2's all-gathers and reduce-scatters: llama_l1b_fsdp4 and llama_l8b_fsdp4; DDP's all-reduces: llama_l1b_ddp4);
- data/h200/e2e/timelines/llama_l1b_1gpu/rank0.json: the 1.5B Llama's layer timeline on one GPU;
- data/h200/e2e/frameworks/profiles/*.trace.json.gz: TorchTitan's 8B steps, with each kernel's grid.
Simulated side: the same configurations under Phantora (benchmarks/e2e/accuracy.py's command, a few steps), for
the sizes and groups of the collectives and for what the kernel gap does to a layer. About 5 minutes on two cores.

What it fits, per group of network operations (FSDP2's all-gather and reduce-scatter give the default pair, DDP's
all-reduce its own `by_op` pair):
- `compute_slowdown`: compute kernels that ran wholly under an NCCL kernel of the group against their twins in the
  same step that ran with no NCCL kernel beside them (twins: the same kernel with the same kernels either side, the
  same place in a layer); summed time beside over the summed median time of their twins, over every rank. Every
  class of kernel counts, as the model slows every kernel that starts beside NCCL (GEMMs alone: 1.47 and 1.42).
- `nccl_slowdown`: every collective kernel of the group that ran beside compute for at least 90 % of its time,
  against the network model's time for it alone (its size and group from the simulated step, paired in order);
  the mean over configurations and operations of the median ratio. A real kernel's time includes its wait for
  late peers, which the simulated ranks, all alike, barely have: the factor carries it (the data phase alone,
  its start taken at the last member's kernel start, is 1.0-1.25 times the model's).
- `kernel_gap_ns`: the one-GPU backward per layer, real against simulated, the difference spread over the kernels
  a simulated layer runs: new = shipped + (real - simulated) / kernels. A GPU-bound backward pays the gap once per
  kernel, so simulated time is linear in it: one step lands on it, and fit_all's next round confirms it.
- `nccl_channels`: NCCL's thread blocks per ring-collective kernel of at least 1 MiB, the most common grid: NCCL's
  launch size for this node, read off its kernels, not fitted.
- `p2p_channels_per_peer`: NCCL's thread blocks per peer of its point-to-point (SendRecv) kernels, the largest power
  of two within their most common grid, read off them the same way.
Factors are kept to 0.01 and the gap to 10 ns, finer than their rank-to-rank spread, so a refit that sees the same
data writes the same file. The network model's constants are the shipped ones (specs/<gpu>/nccl.json).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import BENCHMARKS, REPO, SPECS, data_dir, relative
from benchmarks.e2e.accuracy import phantora_command
from benchmarks.e2e.compare_step import gpu_events, last_step_kernels, load_real, overlap_with, union
from benchmarks.e2e.report import load_split
from phantora.models.network.nccl import NcclModel
from phantora.models.network.topology import Topology
from phantora.specs import load_profile
from phantora.specs.cluster import cluster_from_flags

GPU = "h200"
STEP_PROFILES = data_dir(GPU, "e2e", "step_profiles", "profiles")
TIMELINE = data_dir(GPU, "e2e", "timelines", "llama_l1b_1gpu")
KERNEL_GRIDS = data_dir(GPU, "e2e", "frameworks", "profiles")
CONFIGS = BENCHMARKS / "e2e" / "configs.json"

NEIGHBOURS = 3
"""Kernels either side that make two kernels twins: with fewer, GEMMs of other shapes pass as twins in DDP's step."""
WHOLLY = 0.99
"""A kernel is beside NCCL (or alone) when at least this share of it (or none) overlaps an NCCL kernel."""
MOSTLY = 0.9
"""A collective kernel is beside compute when compute ran for at least this share of it (the launch gaps between
kernels keep it below 1)."""
MIN_GRID_BYTES = 1 << 20
STEPS = 4
"""Simulated steps: the last is a steady one."""
REAL_OPS = {"AllGather": "all_gather", "ReduceScatter": "reduce_scatter", "AllReduce": "all_reduce"}


@dataclass(frozen=True)
class Group:
    """Network operations that share one pair of factors, and the profiled steps that fit it."""

    ops: tuple[str, ...]
    configs: tuple[str, ...]


DEFAULT = Group(("all_gather", "reduce_scatter"), ("llama_l1b_fsdp4", "llama_l8b_fsdp4"))
BY_OP = {"all_reduce": Group(("all_reduce",), ("llama_l1b_ddp4",))}


# --- the real steps ---------------------------------------------------------------------------------------------
Kernel = tuple[str, str, int, float, float]
"""(class, name, stream, start µs, end µs), as benchmarks/e2e/compare_step.py loads a profile."""


def real_op(name: str) -> str | None:
    """The network operation of a real NCCL kernel's name (ncclDevKernel_AllGather_RING_LL ...)."""
    return next((op for word, op in REAL_OPS.items() if f"_{word}_" in name), None)


def profiled_ranks(config: str) -> list[list[Kernel]]:
    paths = sorted((STEP_PROFILES / config).glob("rank*.json.gz"))
    if not paths:
        raise SystemExit(f"{relative(STEP_PROFILES / config)}: no profiled ranks")
    return [load_real(path) for path in paths]


def kernel_times(kernels: list[Kernel], ops: tuple[str, ...]) -> dict[tuple[str, ...], tuple[list[float], list[float]]]:
    """Each compute kernel's place (its and its neighbours' names) -> (durations alone, durations wholly under an
    NCCL kernel of `ops`)."""
    compute = sorted((k for k in kernels if k[0] != "nccl"), key=lambda k: k[3])
    nccl = union([(a, b) for cls, name, _, a, b in kernels if cls == "nccl" and real_op(name) in ops])
    names = [k[1] for k in compute]
    places: dict[tuple[str, ...], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for i, (_, _, _, start, end) in enumerate(compute):
        beside = overlap_with([(start, end)], nccl)
        if beside == 0.0 or beside >= WHOLLY * (end - start):
            places[tuple(names[max(0, i - NEIGHBOURS):i + NEIGHBOURS + 1])][beside > 0].append(end - start)
    return places


def slowdown_beside(steps: list[list[Kernel]], ops: tuple[str, ...]) -> tuple[float, int]:
    """Summed time of compute kernels wholly under an NCCL kernel of `ops` over their twins' median time alone, over
    `steps` (profiled ranks); and how many kernels that counts (0: none had a twin alone, the ratio is then 1)."""
    beside_us = alone_us = 0.0
    count = 0
    for kernels in steps:
        for alone, beside in kernel_times(kernels, ops).values():
            if alone and beside:
                beside_us += sum(beside)
                alone_us += len(beside) * statistics.median(alone)
                count += len(beside)
    return (beside_us / alone_us if count else 1.0), count


def compute_slowdown(group: Group) -> tuple[float, int]:
    steps = [kernels for config in group.configs for kernels in profiled_ranks(config)]
    slowdown, count = slowdown_beside(steps, group.ops)
    if not count:
        raise SystemExit(f"{', '.join(group.configs)}: no kernel ran both alone and beside {', '.join(group.ops)}")
    return slowdown, count


def collectives_beside_compute(kernels: list[Kernel], op: str) -> list[tuple[int, float]]:
    """(index among the step's kernels of `op`, duration µs) of those that ran beside compute."""
    compute = union([(a, b) for cls, _, _, a, b in kernels if cls != "nccl"])
    ordered = sorted((k for k in kernels if k[0] == "nccl" and real_op(k[1]) == op), key=lambda k: k[3])
    return [(i, end - start) for i, (_, _, _, start, end) in enumerate(ordered)
            if overlap_with([(start, end)], compute) >= MOSTLY * (end - start)]


# --- the simulated steps ----------------------------------------------------------------------------------------
def config_of(name: str) -> dict:
    return next(c for c in json.loads(CONFIGS.read_text())["configs"] if c["name"] == name)


def simulate(name: str, out: Path, *, timeline: Path | None = None) -> Path:
    """Run configuration `name` under Phantora for STEPS steps into `out`; its trace.json."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO),
                                                                    os.environ.get("PYTHONPATH")]))}
    if timeline is not None:
        env["PHANTORA_BENCH_TIMELINE"] = str(timeline)
    done = subprocess.run(phantora_command(config_of(name), str(out), STEPS, []), cwd=REPO, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{name}: phantora failed: {last}")
    return out / "trace.json"


def simulated_calls(trace: Path, rank: int, op: str) -> list[dict]:
    """The arguments (size_bytes, group, ...) of `rank`'s calls of `op` in its last simulated step, in order."""
    events = sorted((e for e in last_step_kernels(trace, rank) if e["cat"] == "nccl"), key=lambda e: e["ts"])
    if any(op in {o["op"] for o in e["args"].get("ops", [])} for e in events):
        raise SystemExit(f"{trace}: {op} is coalesced with other calls; pairing kernels needs one call per kernel")
    return [e["args"] for e in events if e["args"].get("op") == op]


def alone_us(nccl: NcclModel, call: dict) -> float:
    """The network model's time for one call with the network to itself."""
    return nccl.plan(call["op"], tuple(call["group"]), call["size_bytes"]).isolated_duration_ns() / 1e3


def nccl_slowdown(group: Group, traces: dict[str, Path]) -> tuple[float, list[str]]:
    """Mean over configurations and operations of the median (real beside compute / alone); and each ratio."""
    ratios, lines = [], []
    for config in group.configs:
        world = config_of(config)["world"]
        nccl = NcclModel(Topology(cluster_from_flags(gpu=GPU, nodes=1, gpus_per_node=world)),
                         load_profile(GPU).nccl.value)
        for op in group.ops:
            per_kernel = []
            for rank, kernels in enumerate(profiled_ranks(config)):
                calls = simulated_calls(traces[config], rank, op)
                real_count = sum(1 for k in kernels if k[0] == "nccl" and real_op(k[1]) == op)
                if real_count != len(calls):
                    raise SystemExit(f"{config} rank {rank}: {real_count} real {op} kernels, {len(calls)} simulated")
                per_kernel += [duration / alone_us(nccl, calls[i])
                               for i, duration in collectives_beside_compute(kernels, op)]
            ratios.append(statistics.median(per_kernel))
            lines.append(f"{config} {op}: {ratios[-1]:.2f} ({len(per_kernel)} kernels)")
    return statistics.mean(ratios), lines


# --- the kernel gap ---------------------------------------------------------------------------------------------
def backward_layers_us(steps: list[list]) -> list[list[tuple[float, float]]]:
    """Per step, the GPU span (start, end µs from the step's start) of each middle layer's backward: layer i's ends
    where layer i-1's starts. The first and last layers of the backward also run the loss's and the embedding's."""
    spans = []
    for step in steps:
        at = {label: gpu_us for label, _, gpu_us in step}
        layers = sum(1 for label in at if label.endswith(".bwd"))
        spans.append([(at[f"L{i}.bwd"], at[f"L{i - 1}.bwd"]) for i in range(2, layers - 1)])
    return spans


def median_layer_us(steps: list[list]) -> float:
    return statistics.median(end - start for spans in backward_layers_us(steps) for start, end in spans)


def kernels_per_layer(timeline: list[list], trace: Path) -> int:
    """Compute kernels the simulated last step runs per middle backward layer (the most common count)."""
    kernels = [e for e in last_step_kernels(trace, 0) if e["cat"] != "nccl"]
    waits = sorted(e["ts"] + e["dur"] for e in json.loads(trace.read_text())["traceEvents"]
                   if e.get("pid") == 0 and e.get("name") == "cudaDeviceSynchronize" and e.get("dur", 0) > 0)
    step_start = waits[-2]  # the synchronize before the last step, where its timeline starts
    counts = [sum(1 for e in kernels if step_start + start <= e["ts"] < step_start + end)
              for start, end in backward_layers_us([timeline[-1]])[0]]
    return Counter(counts).most_common(1)[0][0]


def kernel_gap_ns(shipped_ns: int, work: Path) -> tuple[int, str]:
    real = median_layer_us(json.loads((TIMELINE / "rank0.json").read_text())["steps"])
    trace = simulate("llama_l1b_1gpu", work / "llama_l1b_1gpu", timeline=work / "timeline")
    steps = json.loads((work / "timeline" / "rank0.json").read_text())["steps"]
    simulated, kernels = median_layer_us(steps), kernels_per_layer(steps, trace)
    fitted = round((shipped_ns + 1e3 * (real - simulated) / kernels) / 10) * 10
    return fitted, (f"backward layer real {real:.1f} µs, simulated {simulated:.1f} µs at {shipped_ns} ns, "
                    f"{kernels} kernels -> {fitted} ns")


# --- NCCL's launch size -----------------------------------------------------------------------------------------
def fitting_traces() -> list[Path]:
    """The profiler traces in KERNEL_GRIDS of configurations in the fitting set (the folder also holds held-out
    ones, which no fit may read)."""
    fitting = {name for (name, gpu), entry in load_split().items() if gpu == GPU and entry["set"] == "fitting"}
    return [path for path in sorted(KERNEL_GRIDS.glob("*.trace.json.gz")) if path.name.split(".rank")[0] in fitting]


def kernel_grids(traces: list[Path] | None, wanted: Callable[[dict], bool]) -> Counter[int]:
    """How many of the `wanted` GPU kernels of profiler traces (default: the fitting set's in KERNEL_GRIDS) have each
    grid size (thread blocks)."""
    blocks: Counter[int] = Counter()
    for path in traces if traces is not None else fitting_traces():
        for e in gpu_events(path):
            if wanted(e):
                grid = e["args"]["grid"]
                blocks[grid[0] * grid[1] * grid[2]] += 1
    return blocks


def nccl_channels(traces: list[Path] | None = None) -> tuple[int, str]:
    """The most common grid of the all-gather and reduce-scatter kernels of at least MIN_GRID_BYTES in profiler
    traces (default: the fitting set's in KERNEL_GRIDS, TorchTitan's)."""
    blocks = kernel_grids(traces, lambda e: e["name"].startswith("ncclDevKernel")
                          and real_op(e["name"]) in ("all_gather", "reduce_scatter")
                          and e["args"].get("In msg nelems", 0) * 2 >= MIN_GRID_BYTES)
    if not blocks:
        raise SystemExit(f"{relative(KERNEL_GRIDS)}: no large all-gather or reduce-scatter kernel")
    channels, count = blocks.most_common(1)[0]
    return channels, f"{count} of {sum(blocks.values())} kernels have {channels} blocks"


def p2p_channels_per_peer(traces: list[Path] | None = None) -> tuple[int, str]:
    """NCCL's point-to-point channels per peer: the largest power of two (NCCL rounds its channels per peer to one)
    within the most common grid of the SendRecv kernels in profiler traces (default: the fitting set's in
    KERNEL_GRIDS: context parallelism's permutations, whose 17 blocks are the peer's 16 and one for the empty part
    a rank keeps)."""
    blocks = kernel_grids(traces, lambda e: e["name"].startswith("ncclDevKernel_SendRecv"))
    if not blocks:
        raise SystemExit(f"{relative(KERNEL_GRIDS)}: no point-to-point (SendRecv) kernel")
    grid, count = blocks.most_common(1)[0]
    per_peer = 1 << (grid.bit_length() - 1)
    return per_peer, f"{count} of {sum(blocks.values())} SendRecv kernels have {grid} blocks: {per_peer} per peer"


# --- the fit ----------------------------------------------------------------------------------------------------
def profile_paths(group: Group) -> str:
    return ", ".join(relative(STEP_PROFILES / config) for config in group.configs)


def fit(work: Path) -> tuple[dict, dict]:
    """The fitted constants and their sources; prints how each came out."""
    shipped = load_profile(GPU).sharing.value
    groups = {"": DEFAULT, **BY_OP}
    traces = {config: simulate(config, work / config) for group in groups.values() for config in group.configs}
    factors: dict[str, tuple[float, float]] = {}
    for name, group in groups.items():
        compute, beside = compute_slowdown(group)
        nccl, lines = nccl_slowdown(group, traces)
        factors[name] = (round(compute, 2), round(nccl, 2))
        print(f"{'/'.join(group.ops)}: compute {compute:.3f} ({beside} kernels beside NCCL); nccl {nccl:.3f} "
              f"({'; '.join(lines)})")
    gap, gap_note = kernel_gap_ns(shipped.kernel_gap_ns, work)
    channels, channels_note = nccl_channels()
    per_peer, per_peer_note = p2p_channels_per_peer()
    print(f"kernel gap: {gap_note}\nnccl channels: {channels_note}\np2p channels: {per_peer_note}")
    script = "benchmarks/collectives/fit_sharing.py"
    constants = {"compute_slowdown": factors[""][0], "nccl_slowdown": factors[""][1], "kernel_gap_ns": gap,
                 "nccl_channels": channels, "p2p_channels_per_peer": per_peer,
                 "by_op": {op: {"compute_slowdown": factors[op][0], "nccl_slowdown": factors[op][1]} for op in BY_OP}}
    sources = {
        "compute_slowdown": f"{script} on {profile_paths(DEFAULT)} (compute kernels beside FSDP2's all-gathers "
                            "and reduce-scatters against their twins alone)",
        "nccl_slowdown": f"{script} on {profile_paths(DEFAULT)} (all-gathers and reduce-scatters beside compute "
                         "against the network model alone)",
        "by_op": f"{script} on {', '.join(profile_paths(g) for g in BY_OP.values())} (the same, per operation)",
        "kernel_gap_ns": f"{script} on {relative(TIMELINE)} (the backward per layer)",
        "nccl_channels": f"{script} on {relative(KERNEL_GRIDS)} (NCCL's blocks per large all-gather and "
                         "reduce-scatter kernel: read, not fitted)",
        "p2p_channels_per_peer": f"{script} on {relative(KERNEL_GRIDS)} (NCCL's blocks per peer of the "
                                 "SendRecv kernels: read, not fitted)"}
    return constants, sources


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    p.add_argument("--keep", type=Path, help="keep the simulated runs here (default: a temporary folder)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        constants, sources = fit(work)
    path = update_fitted(GPU, "sharing", constants, sources, specs_root=args.specs)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
