"""The event-driven simulator: sharing over time, late events, determinism under any arrival order."""

import random

import pytest

from phantora.models.interference import GpuSharing
from phantora.models.network import (
    CollectiveRequest,
    LateRequestError,
    NetworkSimulator,
    Topology,
)
from phantora.specs.cluster import cluster_from_flags

from netcases import simulator

MS = 1_000_000  # ns
S = 100_000_000  # bytes: 1 ms alone on a 100 GB/s NVLink port


def ends(done):
    return {c.key: c.end_ns for c in done}


def test_two_transfers_into_one_port_get_half_each():
    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.submit_p2p(src=2, dst=1, size_bytes=S, start_ns=0, key="b")
    assert ends(net.run_until_idle()) == {"a": 2 * MS, "b": 2 * MS}


def test_disjoint_transfers_do_not_interfere():
    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.submit_p2p(src=2, dst=3, size_bytes=S, start_ns=0, key="b")
    net.submit_p2p(src=1, dst=0, size_bytes=S, start_ns=0, key="c")  # reverse direction: other links
    assert ends(net.run_until_idle()) == {"a": MS, "b": MS, "c": MS}


def test_staggered_sharing_by_hand():
    # a alone for 0.5 ms (50 MB sent), then a and b at 50 GB/s: a's last 50 MB take 1 ms (ends 1.5 ms);
    # b has 50 MB sent by then and finishes alone at 100 GB/s in 0.5 ms (ends 2.0 ms).
    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.submit_p2p(src=2, dst=1, size_bytes=S, start_ns=MS // 2, key="b")
    done = net.run_until_idle()
    assert ends(done) == {"a": 3 * MS // 2, "b": 2 * MS}
    assert [c.key for c in done] == ["a", "b"]
    assert done[1].start_ns == MS // 2 and done[1].duration_ns == 3 * MS // 2


def test_collectives_share_links_with_p2p():
    # Ring all_reduce on 2 GPUs: one subflow each way carrying S (2(n-1)/n = 1). A p2p 0->1 shares 0's port.
    net = simulator(gpus_per_node=2)
    net.submit(CollectiveRequest("all_reduce", (0, 1), S, 0, "ar"))
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="p2p")
    assert ends(net.run_until_idle()) == {"ar": 2 * MS, "p2p": 2 * MS}


def test_isolated_simulation_matches_the_plan_for_every_op():
    topo = Topology(cluster_from_flags(gpu="h200", nodes=2, gpus_per_node=4))
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
               "gather", "scatter", "barrier"):
        for size in (8, 1 << 20, 1 << 28):
            net = NetworkSimulator(topo)
            root = 5 if op in ("broadcast", "reduce", "gather", "scatter") else None
            net.submit(CollectiveRequest(op, tuple(range(8)), size, 1000, op, root))
            (c,) = net.run_until_idle()
            plan = net.nccl.plan(op, tuple(range(8)), size, root)
            assert c.end_ns == 1000 + plan.isolated_duration_ns(), op
            assert (c.algorithm, c.protocol) == (plan.algorithm, plan.protocol)


def test_late_arrival_gives_the_in_order_answer():
    def in_order():
        net = simulator(gpus_per_node=4)
        net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
        net.submit_p2p(src=2, dst=1, size_bytes=S, start_ns=MS // 2, key="b")
        return ends(net.run_until_idle())

    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    assert ends(net.speculate()) == {"a": MS}  # looks ahead on a copy...
    assert net.advance_to(MS // 4) == []       # ...and only really advances to a safe time
    net.submit_p2p(src=2, dst=1, size_bytes=S, start_ns=MS // 2, key="b")  # learned late, still in the future
    assert ends(net.run_until_idle()) == in_order() == {"a": 3 * MS // 2, "b": 2 * MS}


def test_breaking_the_safe_time_promise_is_an_error():
    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.advance_to(MS // 2)
    with pytest.raises(LateRequestError, match="before the declared safe time 500000 ns"):
        net.submit_p2p(src=2, dst=1, size_bytes=S, start_ns=MS // 4, key="b")
    net.submit_p2p(src=2, dst=1, size_bytes=S, start_ns=MS // 2, key="b")  # at the safe time: fine
    with pytest.raises(ValueError, match="goes back in time"):
        net.advance_to(1)


def test_request_validation():
    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key=("pg", 1))
    with pytest.raises(ValueError, match="already in flight"):
        net.submit_p2p(src=2, dst=3, size_bytes=S, start_ns=0, key=("pg", 1))
    with pytest.raises(TypeError, match="request key"):
        net.submit_p2p(src=2, dst=3, size_bytes=S, start_ns=0, key=1.5)
    with pytest.raises(ValueError, match="start_ns must be a non-negative integer"):
        net.submit_p2p(src=2, dst=3, size_bytes=S, start_ns=-1, key=2)
    with pytest.raises(ValueError, match="rank 7 is outside"):
        net.submit_p2p(src=2, dst=7, size_bytes=S, start_ns=0, key=3)


def test_run_until_next_completion_and_advance_to_report_final_completions():
    net = simulator(gpus_per_node=4)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.submit_p2p(src=2, dst=3, size_bytes=2 * S, start_ns=0, key="b")
    assert net.next_event_ns() == 0
    assert ends(net.run_until_next_completion()) == {"a": MS}
    assert net.now_ns == MS and net.in_flight == 1
    assert net.advance_to(MS + 1) == []
    assert ends(net.advance_to(5 * MS)) == {"b": 2 * MS}
    assert net.next_event_ns() is None and net.run_until_next_completion() == []


def _random_workload(rng: random.Random, n_requests: int):
    """A mix of every op on 2 nodes x 4 GPUs with random groups, sizes and overlapping start times."""
    ops = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather",
           "scatter", "send_recv", "barrier"]
    reqs = []
    for i in range(n_requests):
        op = rng.choice(ops)
        k = 2 if op == "send_recv" else rng.randint(2, 8)
        group = tuple(rng.sample(range(8), k))
        root = rng.choice(group) if op in ("broadcast", "reduce", "gather", "scatter") else None
        size = rng.choice([8, 4096, 1 << 20, 3 << 20, 1 << 26, 1 << 28])
        start = rng.randrange(0, 3 * MS, 997)  # repeated start times on purpose
        reqs.append(CollectiveRequest(op, group, size, start, ("req", i), root))
    return reqs


def _simulate(topo, reqs, rng: random.Random | None):
    """Submit in the given order; with rng, interleave every call the coordinator could legally make."""
    net = NetworkSimulator(topo)
    done = []
    for i, r in enumerate(reqs):
        if rng is not None:
            safe = min(q.start_ns for q in reqs[i:])  # nothing left to submit starts earlier
            choice = rng.random()
            if choice < 0.3:
                done += net.advance_to(rng.randint(net.now_ns, max(net.now_ns, safe)))
            elif choice < 0.4:
                net.speculate()
            elif choice < 0.5:
                net.next_event_ns()
        net.submit(r)
    done += net.run_until_idle()
    return [(c.key, c.start_ns, c.end_ns, c.algorithm, c.protocol) for c in done]


def test_identical_results_for_any_arrival_order():
    topo = Topology(cluster_from_flags(gpu="h200", nodes=2, gpus_per_node=4))
    rng = random.Random(2024)
    reqs = _random_workload(rng, 60)
    reference = _simulate(topo, sorted(reqs, key=lambda r: (r.start_ns, r.key)), None)
    assert len(reference) == 60
    by_key = {k: (s, e) for k, s, e, _, _ in reference}
    assert all(e > s for s, e in by_key.values())
    for seed in range(12):
        order = list(reqs)
        random.Random(seed).shuffle(order)
        # Adversarial but legal: a request may arrive after others that start later, as long as the
        # caller never declared a safe time past its start.
        order.sort(key=lambda r: (r.start_ns // (MS // 2)))  # coarse time buckets, shuffled inside
        assert _simulate(topo, order, random.Random(seed)) == reference, seed
    # Fully random order with no safe times declared in between.
    for seed in range(5):
        order = list(reqs)
        random.Random(100 + seed).shuffle(order)
        assert _simulate(topo, order, None) == reference


def test_late_flows_actually_interact():
    """The permutation test would be vacuous if requests never shared links: check contention happened."""
    topo = Topology(cluster_from_flags(gpu="h200", nodes=2, gpus_per_node=4))
    reqs = _random_workload(random.Random(2024), 60)
    together = {k: e - s for k, s, e, _, _ in _simulate(topo, reqs, None)}
    alone = {}
    for r in reqs:
        alone[r.key] = _simulate(topo, [r], None)[0][2] - r.start_ns
    slower = [k for k in together if together[k] > alone[k]]
    assert len(slower) >= 10
    assert all(together[k] >= alone[k] for k in together)


def test_speculation_leaves_no_trace():
    topo = Topology(cluster_from_flags(gpu="h200", nodes=2, gpus_per_node=4))
    reqs = _random_workload(random.Random(5), 20)
    a, b = NetworkSimulator(topo), NetworkSimulator(topo)
    for r in reqs:
        a.submit(r)
        b.submit(r)
        a.speculate()
    assert a.run_until_idle() == b.run_until_idle()


# --- compute beside NCCL (Note [Compute beside NCCL]) ---------------------------------------------
def busy_simulator(slowdown: float) -> NetworkSimulator:
    from netcases import cluster
    return NetworkSimulator(Topology(cluster(gpus_per_node=4)), sharing=GpuSharing(nccl_slowdown=slowdown))


def test_a_busy_member_gpu_slows_the_transfer_by_the_factor():
    # 1 ms alone; GPU 1 computes for the first 0.5 ms: 0.5 ms at half speed moves 25 MB,
    # the remaining 75 MB take 0.75 ms at full speed: ends at 1.25 ms.
    net = busy_simulator(2.0)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.mark_compute(1, 0, MS // 2)
    assert ends(net.run_until_idle()) == {"a": 5 * MS // 4}


def test_compute_on_other_gpus_and_extensions_of_a_busy_period():
    net = busy_simulator(2.0)
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.mark_compute(2, 0, 10 * MS)  # not a member: no effect
    net.mark_compute(0, 0, MS // 4)
    net.advance_to(MS // 4)
    net.mark_compute(0, MS // 4, MS // 2)  # back to back: one busy period of 0.5 ms, as above
    assert ends(net.run_until_idle()) == {"a": 5 * MS // 4}


def test_an_operation_with_its_own_factor_is_slowed_by_it_and_the_others_by_the_default():
    # send_recv at 4x: 0.5 ms beside compute moves 12.5 MB, the other 87.5 MB take 0.875 ms.
    from netcases import cluster
    topo = Topology(cluster(gpus_per_node=4))
    net = NetworkSimulator(topo, sharing=GpuSharing(nccl_slowdown=2.0, by_op=(("send_recv", 1.0, 4.0),)))
    net.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    net.mark_compute(1, 0, MS // 2)
    assert ends(net.run_until_idle()) == {"a": 11 * MS // 8}
    only_others = NetworkSimulator(topo, sharing=GpuSharing(nccl_slowdown=2.0, by_op=(("all_gather", 1.0, 4.0),)))
    only_others.submit_p2p(src=0, dst=1, size_bytes=S, start_ns=0, key="a")
    only_others.mark_compute(1, 0, MS // 2)
    assert ends(only_others.run_until_idle()) == {"a": 5 * MS // 4}
    with pytest.raises(ValueError):
        NetworkSimulator(topo, sharing=GpuSharing(by_op=(("all_reduce", 1.0, 0.5),)))


def test_compute_must_be_reported_at_the_safe_time():
    net = busy_simulator(2.0)
    net.advance_to(MS)
    with pytest.raises(LateRequestError):
        net.mark_compute(0, MS // 2, 2 * MS)
    with pytest.raises(ValueError):
        busy_simulator(0.5)


def test_counters_count_instants_coflows_and_the_flows_in_flight():
    from phantora.models.network import CollectiveRequest, NetworkSimulator, Topology
    from phantora.specs.cluster import cluster_from_flags
    net = NetworkSimulator(Topology(cluster_from_flags(gpu="h100", nodes=2, gpus_per_node=8)))
    net.submit(CollectiveRequest("all_gather", tuple(range(16)), 64 << 20, 0, "ag"))  # 8 rings of 16 edges
    net.submit(CollectiveRequest("all_to_all", tuple(range(8)), 64 << 20, 0, "a2a"))  # 56 pairs
    net.run_until_idle()
    counters = net.counters()
    assert counters.flows == counters.peak_flows == 2
    assert counters.peak_subflows == 8 * 16 + 56 and counters.subflows_in_flight == 0
    assert counters.instants >= 3
