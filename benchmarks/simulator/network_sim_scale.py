"""Wall time of the network simulator, 8 to 1024 GPUs: single collectives over every GPU and synthetic steps.

    python -m benchmarks.simulator.network_sim_scale [--gpus 8 16 ... 1024] [--layers 16] [--out DIR]

Two tables, on H100 nodes of 8 GPUs (the default leaf/spine fabric, rails):
- **collectives**: one collective alone over the whole cluster (ring all_reduce, tree all_reduce, all_gather,
  reduce_scatter, all_to_all) and one hierarchical step of collectives (an all_reduce inside every node and a
  reduce_scatter across the nodes for every local rank, at once). `cold` is the first call, building the
  collective's paths; `warm` the same again on a fresh simulator sharing the NCCL model's cache, as every later
  call of a training run.
- **steps**: a synthetic 3-D-parallel step: per layer a tensor-parallel all_reduce in every node (forward and
  backward), a pipeline send between two stages, and data-parallel reduce_scatter + all_gather across nodes for
  every local rank, staggered so that the traffic overlaps.
Each row gives the coflows, the most point-to-point transfers in flight at once (ring edges, pairs: the
"flows"), the event instants and the wall time (best of `--repeat`). `--out` writes results.json and meta.json.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phantora.models.network import CollectiveRequest, NcclModel, NetworkSimulator, Topology
from phantora.specs.cluster import cluster_from_flags

US = 1000
MiB = 1 << 20


def step_requests(nodes: int, gpn: int, layers: int) -> list[CollectiveRequest]:
    reqs = []
    pp = 2 if nodes >= 2 else 1
    nodes_per_stage = nodes // pp
    for layer in range(layers):
        t = layer * 400 * US
        for node in range(nodes):
            tp = tuple(range(node * gpn, (node + 1) * gpn))
            reqs.append(CollectiveRequest("all_reduce", tp, 16 * MiB, t, ("tp_fwd", layer, node)))
            reqs.append(CollectiveRequest("all_reduce", tp, 16 * MiB, t + 150 * US, ("tp_bwd", layer, node)))
        if pp == 2:
            for node in range(nodes_per_stage):
                for g in range(gpn):
                    src = node * gpn + g
                    reqs.append(CollectiveRequest("send_recv", (src, src + nodes_per_stage * gpn), 8 * MiB,
                                                  t + 50 * US, ("pp", layer, src)))
        for stage in range(pp):
            for g in range(gpn):
                dp = tuple((stage * nodes_per_stage + n) * gpn + g for n in range(nodes_per_stage))
                if len(dp) > 1:
                    reqs.append(CollectiveRequest("reduce_scatter", dp, 64 * MiB, t + 200 * US,
                                                  ("rs", layer, stage, g)))
                    reqs.append(CollectiveRequest("all_gather", dp, 64 * MiB, t + 300 * US, ("ag", layer, stage, g)))
    return reqs


def hierarchical_requests(nodes: int, gpn: int) -> list[CollectiveRequest]:
    """An all_reduce inside every node and, at once, a reduce_scatter across the nodes for every local rank."""
    reqs = [CollectiveRequest("all_reduce", tuple(range(n * gpn, (n + 1) * gpn)), 64 * MiB, 0, ("tp", n))
            for n in range(nodes)]
    if nodes > 1:
        reqs += [CollectiveRequest("reduce_scatter", tuple(n * gpn + g for n in range(nodes)), 256 * MiB, 0, ("dp", g))
                 for g in range(gpn)]
    return reqs


def collective_cases(gpus: int, gpn: int) -> dict[str, list[CollectiveRequest]]:
    everyone = tuple(range(gpus))
    return {
        "all_reduce 256 MiB": [CollectiveRequest("all_reduce", everyone, 256 * MiB, 0, "ar")],
        "all_reduce 64 KiB": [CollectiveRequest("all_reduce", everyone, 64 << 10, 0, "ar")],
        "all_gather 256 MiB": [CollectiveRequest("all_gather", everyone, 256 * MiB, 0, "ag")],
        "reduce_scatter 256 MiB": [CollectiveRequest("reduce_scatter", everyone, 256 * MiB, 0, "rs")],
        "all_to_all 256 MiB": [CollectiveRequest("all_to_all", everyone, 256 * MiB, 0, "a2a")],
        "hierarchical": hierarchical_requests(gpus // gpn, gpn),
    }


def simulate(topology: Topology, nccl: NcclModel, requests: list[CollectiveRequest]) -> dict[str, Any]:
    """Submit everything, run to the end; what it took."""
    net = NetworkSimulator(topology, nccl)
    start = time.perf_counter()
    for request in requests:
        net.submit(request)
    done = net.run_until_idle()
    wall = time.perf_counter() - start
    counters = net.counters()
    return {"wall_s": wall, "simulated_ms": max(c.end_ns for c in done) / 1e6, "collectives": len(requests),
            "coflows": counters.flows, "peak_flows": counters.peak_subflows, "peak_coflows": counters.peak_flows,
            "instants": counters.instants, "algorithms": sorted({c.algorithm for c in done})}


def best_of(repeat: int, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    runs = [run() for _ in range(repeat)]
    assert all(r["simulated_ms"] == runs[0]["simulated_ms"] for r in runs), "the simulation is not deterministic"
    return {**runs[0], "wall_s": min(r["wall_s"] for r in runs)}


def collective_rows(gpus: int, repeat: int) -> list[dict[str, Any]]:
    gpn = min(8, gpus)
    topology = Topology(cluster_from_flags(gpu="h100", nodes=gpus // gpn, gpus_per_node=gpn))
    rows = []
    for name, requests in collective_cases(gpus, gpn).items():
        cold = best_of(repeat, lambda: simulate(topology, NcclModel(topology), requests))
        shared = NcclModel(topology)
        simulate(topology, shared, requests)
        warm = best_of(repeat, lambda: simulate(topology, shared, requests))
        rows.append({"gpus": gpus, "case": name, **warm, "cold_wall_s": cold["wall_s"]})
    return rows


def step_row(gpus: int, layers: int, repeat: int) -> dict[str, Any]:
    gpn = min(8, gpus)
    nodes = gpus // gpn
    topology = Topology(cluster_from_flags(gpu="h100", nodes=nodes, gpus_per_node=gpn))
    requests = step_requests(nodes, gpn, layers)
    best = best_of(repeat, lambda: simulate(topology, NcclModel(topology), requests))
    return {"gpus": gpus, "layers": layers, **best}


def print_collectives(rows: list[dict[str, Any]]) -> None:
    print(f"{'GPUs':>5} {'collective':<24} {'algorithm':<10} {'coflows':>7} {'flows':>7} {'instants':>8} "
          f"{'sim ms':>9} {'cold ms':>8} {'warm ms':>8}")
    for r in rows:
        print(f"{r['gpus']:>5} {r['case']:<24} {'/'.join(r['algorithms']):<10} {r['coflows']:>7} {r['peak_flows']:>7} "
              f"{r['instants']:>8} {r['simulated_ms']:>9.3f} {1e3 * r['cold_wall_s']:>8.1f} {1e3 * r['wall_s']:>8.1f}")


def print_steps(rows: list[dict[str, Any]]) -> None:
    print(f"{'GPUs':>5} {'collectives':>11} {'coflows in flight':>17} {'flows in flight':>15} {'instants':>8} "
          f"{'sim step ms':>11} {'wall s':>7} {'us/collective':>13}")
    for r in rows:
        print(f"{r['gpus']:>5} {r['collectives']:>11} {r['peak_coflows']:>17} {r['peak_flows']:>15} {r['instants']:>8} "
              f"{r['simulated_ms']:>11.2f} {r['wall_s']:>7.2f} {1e6 * r['wall_s'] / r['collectives']:>13.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256, 512, 1024])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the best wall time is kept")
    ap.add_argument("--out", type=Path, help="folder for results.json and meta.json")
    args = ap.parse_args()
    collectives = [row for gpus in args.gpus for row in collective_rows(gpus, args.repeat)]
    print_collectives(collectives)
    print()
    steps = [step_row(gpus, args.layers, args.repeat) for gpus in args.gpus]
    print_steps(steps)
    if args.out:
        from benchmarks.common.env import write_meta
        write_meta(args.out, __file__, what="wall time of the network simulator, 8-1024 GPUs: collectives and "
                                            "synthetic 3-D-parallel steps")
        results = {"collectives": collectives, "steps": steps}
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
