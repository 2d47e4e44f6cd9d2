"""Wall time of the network simulator on synthetic training steps (3-D parallel traffic), 8 to 1024 GPUs.

    python -m benchmarks.simulator.network_sim_scale [--gpus 8 64 512 1024] [--layers 16]

One "step": per layer, a tensor-parallel all_reduce inside every node (forward and backward), a
pipeline send between stages, and data-parallel reduce_scatter + all_gather buckets across nodes for
every local rank, with start times staggered so that the traffic overlaps. Prints collectives, flow
events and wall time per step.
"""

from __future__ import annotations

import argparse
import time

from phantora.models.network import CollectiveRequest, NetworkSimulator, Topology
from phantora.specs.cluster import cluster_from_flags

US = 1000


def step_requests(nodes: int, gpn: int, layers: int) -> list[CollectiveRequest]:
    reqs = []
    pp = 2 if nodes >= 2 else 1
    nodes_per_stage = nodes // pp
    for layer in range(layers):
        t = layer * 400 * US
        for node in range(nodes):
            tp = tuple(range(node * gpn, (node + 1) * gpn))
            reqs.append(CollectiveRequest("all_reduce", tp, 16 << 20, t, ("tp_fwd", layer, node)))
            reqs.append(CollectiveRequest("all_reduce", tp, 16 << 20, t + 150 * US, ("tp_bwd", layer, node)))
        if pp == 2:
            for node in range(nodes_per_stage):
                for g in range(gpn):
                    src = node * gpn + g
                    reqs.append(CollectiveRequest("send_recv", (src, src + nodes_per_stage * gpn), 8 << 20,
                                                  t + 50 * US, ("pp", layer, src)))
        for stage in range(pp):
            for g in range(gpn):
                dp = tuple((stage * nodes_per_stage + n) * gpn + g for n in range(nodes_per_stage))
                if len(dp) > 1:
                    reqs.append(CollectiveRequest("reduce_scatter", dp, 64 << 20, t + 200 * US, ("rs", layer, stage, g)))
                    reqs.append(CollectiveRequest("all_gather", dp, 64 << 20, t + 300 * US, ("ag", layer, stage, g)))
    return reqs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 64, 512, 1024])
    ap.add_argument("--layers", type=int, default=16)
    args = ap.parse_args()
    print(f"{'GPUs':>6} {'collectives':>12} {'sim step ms':>12} {'wall s':>8} {'us/collective':>14}")
    for gpus in args.gpus:
        gpn = min(8, gpus)
        nodes = gpus // gpn
        topo = Topology(cluster_from_flags(gpu="h100", nodes=nodes, gpus_per_node=gpn))
        reqs = step_requests(nodes, gpn, args.layers)
        net = NetworkSimulator(topo)
        t0 = time.perf_counter()
        for r in reqs:
            net.submit(r)
        done = net.run_until_idle()
        wall = time.perf_counter() - t0
        print(f"{gpus:>6} {len(reqs):>12} {max(c.end_ns for c in done) / 1e6:>12.2f} {wall:>8.2f} "
              f"{wall / len(reqs) * 1e6:>14.0f}")


if __name__ == "__main__":
    main()
