"""Cluster description, validation, links and paths."""

import numpy as np
import pytest

from phantora.models.network import FabricConfig, Topology
from phantora.specs.cluster import cluster_from_flags, cluster_from_toml, cluster_from_toml_dict
from phantora.models.network.topology import ecmp_hash

from netcases import cluster


def test_flags_use_family_defaults():
    c = cluster_from_flags(gpu="H100", nodes=4, gpus_per_node=8)
    assert (c.gpu, c.nodes, c.gpus_per_node, c.num_gpus) == ("h100", 4, 8, 32)
    assert c.nvlink.bandwidth_bytes_per_s == 450e9
    assert c.nic.nics_per_node == 8 and c.nic.bandwidth_bytes_per_s == 50e9  # 400 Gb/s


def test_unknown_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown GPU 'v100'.*known GPUs: a100, b200, h100, h200"):
        cluster_from_flags(gpu="v100")


@pytest.mark.parametrize("kw, msg", [
    (dict(nodes=0), "nodes must be >= 1"),
    (dict(gpus_per_node=0), "gpus_per_node must be >= 1"),
    (dict(gpus_per_node=4, nics_per_node=3), "multiple of nics_per_node"),
    (dict(gpus_per_node=2, nics_per_node=4), "cannot exceed"),
    (dict(nodes=2, nics_per_node=0), "needs nics_per_node >= 1"),
])
def test_cluster_validation(kw, msg):
    with pytest.raises(ValueError, match=msg):
        cluster(**kw)


def test_toml_file(tmp_path):
    f = tmp_path / "cluster.toml"
    f.write_text(
        'gpu = "h200"\nnodes = 4\ngpus_per_node = 8\n'
        "[nic]\nnics_per_node = 4\nbandwidth_gbits_per_s = 200\n"
        '[fabric]\nkind = "leaf_spine"\nnodes_per_leaf = 2\nspines = 2\noversubscription = 2.0\nrail_optimized = false\n')
    c = cluster_from_toml(f)
    assert c.nic.nics_per_node == 4 and c.nic.bandwidth_bytes_per_s == 25e9
    assert c.fabric.oversubscription == 2.0 and not c.fabric.rail_optimized
    assert c.nvlink.bandwidth_bytes_per_s == 450e9


@pytest.mark.parametrize("data, msg", [
    ({"nodes": 2}, "missing required key 'gpu'"),
    ({"gpu": "h200", "nic": {"bandwidth": 1}}, r"\[nic\]: unknown key\(s\) \['bandwidth'\]"),
    ({"gpu": "h200", "bogus_key": 3}, r"unknown key\(s\) \['bogus_key'\]; allowed: gpu, nodes"),
    ({"gpu": "h200", "compute": {"x": 1}}, r"unknown key\(s\) \['compute'\]"),
    ({"gpu": "h200", "fabric": {"kind": "torus"}}, "fabric kind must be"),
    ({"gpu": "h200", "fabric": {"oversubscription": 0}}, r"\[fabric\] oversubscription = 0: must be > 0"),
    ({"gpu": "h200", "nvlink": {"bandwidth_gbytes_per_s": -1}}, r"\[nvlink\] bandwidth_gbytes_per_s = -1: must be > 0"),
    ({"gpu": "h200", "nccl": {"protocols": ["LL", "Fast"]}}, "unknown NCCL protocol 'Fast'"),
    ({"gpu": "h200", "nic": 3}, r"\[nic\] must be a table"),
])
def test_toml_errors(data, msg):
    with pytest.raises(ValueError, match=msg):
        cluster_from_toml_dict(data)


def test_malformed_toml_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("gpu = \n")
    with pytest.raises(ValueError, match="not valid TOML"):
        cluster_from_toml(f)
    with pytest.raises(ValueError, match="does not exist"):
        cluster_from_toml(tmp_path / "missing.toml")


def test_intra_node_path_uses_the_two_nvlink_ports():
    t = Topology(cluster(gpus_per_node=4, nvlink_latency_ns=300))
    p = t.gpu_path(1, 3)
    assert [t.link_names[l] for l in p.link_ids] == ["gpu1.nvl_tx", "gpu3.nvl_rx"]
    assert p.latency_ns == 300 and not p.inter_node


def test_nic_sharing_and_inter_node_path():
    t = Topology(cluster(nodes=2, gpus_per_node=4, nics_per_node=2))
    assert [t.nic_of(g) for g in range(4)] == [0, 0, 1, 1]
    p = t.gpu_path(2, 7)
    assert [t.link_names[l] for l in p.link_ids] == ["node0.nic1.tx", "node1.nic1.rx"]
    assert p.inter_node


def test_leaf_spine_capacities_follow_oversubscription():
    fab = FabricConfig(kind="leaf_spine", nodes_per_leaf=2, spines=2, oversubscription=4.0, rail_optimized=False)
    t = Topology(cluster(nodes=4, gpus_per_node=1, nics_per_node=1, nic_bytes_per_s=50e9, fabric=fab))
    assert t.num_leaves == 2 and t.num_spines == 2
    ups = [t.capacities_bytes_per_s[i] for i, n in enumerate(t.link_names) if ".up" in n]
    assert ups == [2 * 50e9 / 4.0 / 2] * 4  # 2 NICs per leaf, /4 oversubscription, /2 spines
    same_leaf = t.gpu_path(0, 1)
    assert len(same_leaf.link_ids) == 2
    cross = t.gpu_path(0, 2)
    names = [t.link_names[l] for l in cross.link_ids]
    assert names[0] == "node0.nic0.tx" and names[1].startswith("leaf0.up") and names[2].startswith("spine")
    assert names[3] == "node2.nic0.rx"


def test_rail_optimized_keeps_same_rail_traffic_on_its_leaf():
    fab = FabricConfig(kind="leaf_spine", nodes_per_leaf=4, spines=2, rail_optimized=True)
    t = Topology(cluster(nodes=4, gpus_per_node=2, nics_per_node=2, fabric=fab))
    assert t.num_leaves == 2  # one leaf per rail
    assert len(t.gpu_path(0, 2).link_ids) == 2  # rail 0 -> rail 0: leaf only
    assert len(t.gpu_path(0, 3).link_ids) == 4  # rail 0 -> rail 1: through a spine


def test_ecmp_is_a_pure_function_of_the_transfer():
    fab = FabricConfig(kind="leaf_spine", nodes_per_leaf=1, spines=4, rail_optimized=False)
    c = cluster(nodes=8, gpus_per_node=1, fabric=fab)
    a, b = Topology(c), Topology(c)
    for _ in range(3):
        b.gpu_path(5, 6, label=9)  # history does not matter
    paths = {a.gpu_path(0, 7, label=k).link_ids for k in range(16)}
    assert len(paths) > 1  # labels spread over spines
    assert all(a.gpu_path(s, d, k) == b.gpu_path(s, d, k) for s in range(8) for d in range(8) if s != d for k in range(4))
    assert ecmp_hash(1, 2, 3) == ecmp_hash(1, 2, 3) != ecmp_hash(2, 1, 3)


def test_bad_endpoints():
    t = Topology(cluster(gpus_per_node=2))
    with pytest.raises(ValueError, match="GPU 5 does not exist"):
        t.gpu_path(0, 5)
    with pytest.raises(ValueError, match="itself"):
        t.gpu_path(1, 1)


@pytest.mark.parametrize("fabric", [
    {"nodes_per_leaf": 2, "spines": 3, "rail_optimized": False, "oversubscription": 2.0, "switch_latency_us": 0.3},
    {"nodes_per_leaf": 2, "spines": 4, "switch_latency_us": 0.2},
    {"kind": "single_switch"},
])
def test_many_paths_at_once_are_the_scalar_paths(fabric):
    t = Topology(cluster_from_toml_dict({"gpu": "h100", "nodes": 5, "fabric": fabric, "nic": {"latency_us": 1.5},
                                         "nvlink": {"latency_us": 0.1}}))
    pairs = [(s, d) for s in range(t.num_gpus) for d in range(t.num_gpus) if s != d]
    batch = t.gpu_paths(np.array([s for s, _ in pairs]), np.array([d for _, d in pairs]))
    scalar = [t.gpu_path(s, d) for s, d in pairs]
    assert sorted(batch.link_ids.tolist()) == sorted(link for p in scalar for link in p.link_ids)
    assert batch.inter_latency_ns == max(p.latency_ns for p in scalar if p.inter_node)
    assert batch.intra_latency_ns == max(p.latency_ns for p in scalar if not p.inter_node)
    assert batch.paths == len(pairs)
    nodes = [(a, b) for a in range(5) for b in range(5) if a != b]
    for label in (0, 7):
        nics = t.nic_paths(np.array([a for a, _ in nodes for _ in range(8)]),
                           np.array([k for _ in nodes for k in range(8)]),
                           np.array([b for _, b in nodes for _ in range(8)]),
                           np.array([7 - k for _ in nodes for k in range(8)]), label)
        expected = [link for a, b in nodes for k in range(8) for link in t.nic_path(a, k, b, 7 - k, label).link_ids]
        assert sorted(nics.link_ids.tolist()) == sorted(expected)
