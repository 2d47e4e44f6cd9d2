"""`--gpus-per-node` and `--nic-gbps`: quick what-ifs equivalent to the cluster file's fields."""

from __future__ import annotations

import pytest

from phantora.cli.main import CliError, build_parser, config_from_args
from phantora.models.network import CollectiveRequest, NetworkSimulator, Topology


def torchrun_cluster(tmp_path, *words: str):
    script = tmp_path / "train.py"
    script.write_text("")
    args = build_parser().parse_args(["torchrun", *words, str(script)])
    config, _ = config_from_args(args)
    return config.cluster


def all_reduce_ns(cluster) -> int:
    net = NetworkSimulator(Topology(cluster))
    net.submit(CollectiveRequest("all_reduce", tuple(range(cluster.num_gpus)), 256 << 20, 0, "ar"))
    (done,) = net.run_until_idle()
    return done.duration_ns


def test_nic_gbps_changes_a_multi_node_all_reduce_as_the_cluster_file_does(tmp_path):
    job = ["--nnodes", "2", "--nproc-per-node", "8"]
    default = torchrun_cluster(tmp_path, "--gpu", "h100", *job)
    flag = torchrun_cluster(tmp_path, "--gpu", "h100", "--nic-gbps", "100", *job)
    file = tmp_path / "c.toml"
    file.write_text('gpu = "h100"\nnodes = 2\n[nic]\nbandwidth_gbits_per_s = 100\n')
    from_file = torchrun_cluster(tmp_path, "--cluster", str(file), *job)
    assert flag == from_file
    assert all_reduce_ns(flag) == all_reduce_ns(from_file) > 2 * all_reduce_ns(default)


def test_gpus_per_node_sets_the_nvlink_domain_as_the_cluster_file_does(tmp_path):
    flag = torchrun_cluster(tmp_path, "--gpu", "h100", "--gpus-per-node", "4", "--nnodes", "4", "--nproc-per-node", "4")
    file = tmp_path / "c.toml"
    file.write_text('gpu = "h100"\nnodes = 4\ngpus_per_node = 4\n')
    from_file = torchrun_cluster(tmp_path, "--cluster", str(file), "--nnodes", "4", "--nproc-per-node", "4")
    assert flag == from_file and flag.gpus_per_node == 4 and flag.nic.nics_per_node == 4
    eight = torchrun_cluster(tmp_path, "--gpu", "h100", "--nnodes", "2", "--nproc-per-node", "8")
    assert all_reduce_ns(flag) != all_reduce_ns(eight)  # 16 GPUs either way, in NVLink domains of 4 or 8
    one_domain = torchrun_cluster(tmp_path, "--gpu", "h100", "--gpus-per-node", "16", "--nproc-per-node", "16")
    assert one_domain.nodes == 1 and one_domain.gpus_per_node == 16


def test_the_flags_override_a_cluster_file(tmp_path):
    file = tmp_path / "c.toml"
    file.write_text('gpu = "h100"\nnodes = 2\n[nic]\nbandwidth_gbits_per_s = 100\n')
    cluster = torchrun_cluster(tmp_path, "--cluster", str(file), "--nic-gbps", "800", "--nnodes", "2",
                               "--nproc-per-node", "8")
    assert cluster.nic.bandwidth_bytes_per_s == 800e9 / 8


@pytest.mark.parametrize("words", [["--nic-gbps", "0"], ["--nic-gbps", "-3"], ["--nic-gbps", "fast"],
                                   ["--gpus-per-node", "0"], ["--gpus-per-node", "2.5"]])
def test_bad_values_are_one_line_errors(tmp_path, words):
    with pytest.raises(CliError, match=words[0]):
        torchrun_cluster(tmp_path, "--gpu", "h100", *words, "--nproc-per-node", "1")
