"""NCCL algorithm/protocol choice and collective costs against hand-computed times."""

from dataclasses import replace

import pytest

from phantora.models.network import FabricConfig, NcclModel, Topology
from phantora.specs.cluster import cluster_from_flags
from phantora.models.network.config import PerProtocol

from netcases import IDEAL, cluster

MS = 1_000_000  # ns


def alone_ns(topo_cluster, op, group, size, root=None):
    topo = Topology(topo_cluster)
    return NcclModel(topo).plan(op, tuple(group), size, root).isolated_duration_ns()


def test_ring_all_reduce_is_2_n_minus_1_over_n_s_over_b_plus_latency():
    # n = 4, B = 100 GB/s, S = 400 MB: 2*3/4 * 400e6 / 100e9 = 6 ms. Latency: base 5 us + 6 steps x 1 us.
    tuning = replace(IDEAL, ring_base_latency_ns=PerProtocol(ll=0, ll128=0, simple=5000),
                     nvlink_step_latency_ns=PerProtocol(ll=0, ll128=0, simple=1000), launch_overhead_ns=2000)
    c = cluster(gpus_per_node=4, tuning=tuning)
    assert alone_ns(c, "all_reduce", range(4), 400_000_000) == 6 * MS + 2000 + 5000 + 6 * 1000


@pytest.mark.parametrize("op, n, expected_ms", [
    ("all_gather", 4, 3.0),      # (n-1)/n * S / B
    ("reduce_scatter", 4, 3.0),
    ("all_reduce", 2, 4.0),      # 2(n-1)/n = 1
    ("broadcast", 4, 4.0),       # pipelined chain: S / B
    ("reduce", 4, 4.0),
    ("all_to_all", 4, 3.0),      # each rank sends 3 x S/4
    ("gather", 4, 3.0),          # root receives 3 x S/4 through one port
    ("scatter", 4, 3.0),
])
def test_bandwidth_terms_by_op(op, n, expected_ms):
    c = cluster(gpus_per_node=4)
    root = 0 if op in ("broadcast", "reduce", "gather", "scatter") else None
    assert alone_ns(c, op, range(n), 400_000_000, root) == expected_ms * MS


def test_send_recv_and_local_copy_tail():
    c = cluster(gpus_per_node=2, tuning=replace(IDEAL, local_copy_bytes_per_s=400e9))
    assert alone_ns(c, "send_recv", (1, 0), 100_000_000) == 1 * MS
    # all_gather on 2 GPUs: (1/2) S / B on the links, then S/2 own chunk at 400 GB/s.
    assert alone_ns(c, "all_gather", (0, 1), 400_000_000) == 2 * MS + 500_000


def test_small_messages_are_latency_bound_and_pick_ll():
    c = cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=8)
    model = NcclModel(Topology(c))
    small, tiny = model.plan("all_reduce", tuple(range(8)), 4096), model.plan("all_reduce", tuple(range(8)), 8)
    assert small.protocol == "LL"
    t = c.nccl
    latency = t.launch_overhead_ns + t.ring_base_latency_ns.ll + 14 * t.nvlink_step_latency_ns.ll
    assert small.latency_ns == latency
    assert abs(small.isolated_duration_ns() - latency) < 0.05 * latency
    assert abs(small.isolated_duration_ns() - tiny.isolated_duration_ns()) < 0.05 * latency
    big = model.plan("all_reduce", tuple(range(8)), 1 << 30)
    assert big.protocol == "Simple"
    # Bandwidth term: 2(n-1)/n S / (efficiency x 450 GB/s), between the latency and the own-chunk tail.
    bw = 2 * 7 / 8 * (1 << 30) / (t.nvlink_efficiency * 450e9) * 1e9
    assert abs(big.isolated_duration_ns() - big.latency_ns - big.tail_ns - bw) <= 1
    assert big.tail_ns == -(-(1 << 30) // 8 * 10**9 // int(t.local_copy_bytes_per_s))


def test_cross_node_all_reduce_is_limited_by_the_nics():
    # One GPU per node, 50 GB/s NICs: the ring's two inter-node edges each carry S.
    c = cluster(nodes=2, gpus_per_node=1, nics_per_node=1, nic_bytes_per_s=50e9)
    assert alone_ns(c, "all_reduce", (0, 1), 100_000_000) == 2 * MS
    # 2 nodes x 4 GPUs, a NIC per GPU: 4 rings, each leaves a node through its own NIC -> bus bw 4 x 50 GB/s.
    c = cluster(nodes=2, gpus_per_node=4, nics_per_node=4, nic_bytes_per_s=50e9, nvlink_bytes_per_s=450e9)
    s = 800_000_000
    assert alone_ns(c, "all_reduce", range(8), s) == 2 * 7 / 8 * s / 200e9 * 1e9
    # One NIC shared by the 4 GPUs of a node: bus bw 50 GB/s.
    c = cluster(nodes=2, gpus_per_node=4, nics_per_node=1, nic_bytes_per_s=50e9, nvlink_bytes_per_s=450e9)
    assert alone_ns(c, "all_reduce", range(8), s) == 2 * 7 / 8 * s / 50e9 * 1e9


def test_oversubscription_slows_cross_leaf_rings():
    s = 100_000_000
    times = {}
    for over in (1.0, 2.0):
        fab = FabricConfig(kind="leaf_spine", nodes_per_leaf=2, spines=1, oversubscription=over, rail_optimized=False)
        c = cluster(nodes=4, gpus_per_node=1, nics_per_node=1, nic_bytes_per_s=50e9, fabric=fab)
        times[over] = alone_ns(c, "all_reduce", range(4), s)
    # Ring 0-1-2-3-0: edges 1->2 and 3->0 both cross leaf<->spine; non-blocking uplinks (100 GB/s) leave
    # the NICs as the bottleneck, with 2x oversubscription each uplink (50 GB/s) still carries one edge.
    assert times[1.0] == 2 * 3 / 4 * s / 50e9 * 1e9
    assert times[2.0] == times[1.0]
    fab = FabricConfig(kind="leaf_spine", nodes_per_leaf=2, spines=1, oversubscription=4.0, rail_optimized=False)
    c = cluster(nodes=4, gpus_per_node=1, nics_per_node=1, nic_bytes_per_s=50e9, fabric=fab)
    assert alone_ns(c, "all_reduce", range(4), s) == 2 * 3 / 4 * s / 25e9 * 1e9  # uplink 25 GB/s


def test_tree_for_small_multi_node_all_reduce_ring_for_large():
    c = cluster_from_flags(gpu="h200", nodes=4, gpus_per_node=8)
    model = NcclModel(Topology(c))
    group = tuple(range(32))
    assert model.plan("all_reduce", group, 4096).algorithm == "tree"
    assert model.plan("all_reduce", group, 1 << 30).algorithm == "ring"
    # NCCL's tree estimate: algbw = 0.9 x ring bus bandwidth / 2.
    cands = {(p.algorithm, p.protocol): p for p in model.candidates("all_reduce", group, 1 << 30)}
    tree, ring = cands["tree", "Simple"], cands["ring", "Simple"]
    ring_bus = 2 * 31 / 32 * (1 << 30) / ((ring.isolated_duration_ns() - ring.latency_ns - ring.tail_ns) / 1e9)
    tree_bw_ns = tree.isolated_duration_ns() - tree.latency_ns - tree.tail_ns
    assert abs(tree_bw_ns - 2 * (1 << 30) / (0.9 * ring_bus) * 1e9) <= 2
    assert tree.bytes_per_subflow == (1 << 30) / 16  # 8 channels (NICs) x 2 trees


def test_barrier_single_rank_and_zero_bytes_cost_latency_only():
    c = cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=4)
    model = NcclModel(Topology(c))
    assert model.plan("all_reduce", (2,), 1 << 20).isolated_duration_ns() == c.nccl.launch_overhead_ns
    assert model.plan("all_gather", (0, 1), 0).isolated_duration_ns() == c.nccl.launch_overhead_ns
    barrier = model.plan("barrier", (0, 1, 2, 3), 0)
    assert barrier.protocol == "LL" and barrier.isolated_duration_ns() < 2 * model.plan("all_reduce", (0, 1, 2, 3), 4).latency_ns


@pytest.mark.parametrize("args, msg", [
    (("all_sum", (0, 1), 8), "unknown collective 'all_sum'"),
    (("all_reduce", (0, 0), 8), "lists a rank twice"),
    (("all_reduce", (0, 9), 8), "rank 9 is outside"),
    (("all_reduce", (), 8), "empty group"),
    (("all_reduce", (0, 1), -1), "size_bytes must be >= 0"),
    (("broadcast", (0, 1), 8), "root None must be a member"),
    (("send_recv", (0, 1, 2), 8), "send_recv: group must be"),
])
def test_bad_collectives(args, msg):
    model = NcclModel(Topology(cluster(gpus_per_node=4)))
    with pytest.raises(ValueError, match=msg):
        model.plan(*args)


def test_protocol_and_algorithm_restrictions():
    c = cluster_from_flags(gpu="h200", nodes=2, gpus_per_node=8)
    only_simple = replace(c.nccl, protocols=("Simple",), algorithms=("ring",))
    model = NcclModel(Topology(c), only_simple)
    p = model.plan("all_reduce", tuple(range(16)), 8)
    assert (p.algorithm, p.protocol) == ("ring", "Simple")
    with pytest.raises(ValueError, match="ring algorithm cannot be disabled"):
        replace(c.nccl, algorithms=("tree",))
