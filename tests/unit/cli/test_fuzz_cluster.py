"""Bad cluster files and bad flags, generated from a seed: each one is a one-line error naming the field and exit
code 2, never a traceback and never a launch. In process through `main()` (from the shell:
tests/integration/test_cli_bad_input.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import phantora.cli.main as cli

VALID: dict[str, Any] = {
    "gpu": "h100", "nodes": 4, "gpus_per_node": 8,
    "nvlink": {"bandwidth_gbytes_per_s": 450.0, "latency_us": 0.0},
    "nic": {"nics_per_node": 8, "bandwidth_gbits_per_s": 400.0, "latency_us": 0.0},
    "fabric": {"kind": "leaf_spine", "nodes_per_leaf": 2, "spines": 2, "oversubscription": 1.0,
               "rail_optimized": True, "switch_latency_us": 0.0},
    "nccl": {"algorithms": ["ring", "tree"], "protocols": ["LL", "LL128", "Simple"]},
    "variant": {"name": "NVIDIA H100", "memory_gbytes": 96, "memory_type": "HBM2e",
                "memory_bandwidth_gbytes_per_s": 2400.0, "power_limit_w": 500.0, "boost_clock_mhz": 1980.0},
}
"""A cluster file that is valid in every key; each case breaks one thing in it."""

BANDWIDTHS = [("nvlink", "bandwidth_gbytes_per_s"), ("nic", "bandwidth_gbits_per_s"),
              ("variant", "memory_bandwidth_gbytes_per_s")]
COUNTS = [(None, "nodes"), (None, "gpus_per_node"), ("nic", "nics_per_node"), ("fabric", "nodes_per_leaf"),
          ("fabric", "spines")]
NUMBERS = BANDWIDTHS + [("nvlink", "latency_us"), ("nic", "latency_us"), ("fabric", "oversubscription"),
                        ("fabric", "switch_latency_us"), ("variant", "memory_gbytes"), ("variant", "power_limit_w"),
                        ("variant", "boost_clock_mhz")]
STRINGS = [(None, "gpu"), ("fabric", "kind"), ("variant", "name"), ("variant", "memory_type")]
Case = tuple[dict[str, Any], str]
"""A cluster (as TOML data) and the name the error must contain."""


def _with(data: dict[str, Any], table: str | None, key: str, value: Any) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    (out if table is None else out[table])[key] = value
    return out


def _without(data: dict[str, Any], table: str, key: str) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    del out[table][key]
    return out


def unknown_key(rng: random.Random) -> Case:
    table = rng.choice([None, "nvlink", "nic", "fabric", "nccl", "variant"])
    key = rng.choice(["nic_gbps", "bogus_key", "bandwidth", "gpus", "spine", "memory_gb", "power_w"])
    return _with(VALID, table, key, rng.choice([1, 2.5, "x", True])), key


def unknown_table(rng: random.Random) -> Case:
    name = rng.choice(["compute", "nics", "network", "gpu_variant"])
    return {**VALID, name: {"x": 1}}, name


def wrong_type(rng: random.Random) -> Case:
    table, key = rng.choice(NUMBERS + COUNTS + [("fabric", "rail_optimized")])
    bad = rng.choice(["400", [1, 2], {"a": 1}] + ([True] if key != "rail_optimized" else [1, "yes"]))
    if (table, key) in COUNTS:
        bad = rng.choice([bad, 2.5])
    return _with(VALID, table, key, bad), key


def wrong_string_type(rng: random.Random) -> Case:
    table, key = rng.choice(STRINGS)
    return _with(VALID, table, key, rng.choice([3, 1.5, True, ["h100"]])), key


def not_positive(rng: random.Random) -> Case:
    table, key = rng.choice(BANDWIDTHS + [("fabric", "oversubscription"), ("variant", "power_limit_w"),
                                          ("variant", "memory_gbytes"), ("variant", "boost_clock_mhz")])
    return _with(VALID, table, key, rng.choice([0, 0.0, -1, -400.5])), key


def negative_latency(rng: random.Random) -> Case:
    table, key = rng.choice([("nvlink", "latency_us"), ("nic", "latency_us"), ("fabric", "switch_latency_us")])
    return _with(VALID, table, key, -rng.choice([0.5, 1, 30])), key


def zero_count(rng: random.Random) -> Case:
    table, key = rng.choice(COUNTS)
    return _with(VALID, table, key, rng.choice([0, -1, -8])), key


def impossible_topology(rng: random.Random) -> Case:
    kind = rng.randrange(6)
    if kind == 0:  # more NICs than GPUs
        return _with(_with(VALID, None, "gpus_per_node", 4), "nic", "nics_per_node", 8), "nics_per_node"
    if kind == 1:  # GPUs that do not divide over the NICs
        return _with(_with(VALID, None, "gpus_per_node", 6), "nic", "nics_per_node", 4), "nics_per_node"
    if kind == 2:
        return _with(VALID, "fabric", "kind", rng.choice(["torus", "fat_tree", ""])), "kind"
    if kind == 3:
        return _with(VALID, "nccl", "protocols", ["LL", rng.choice(["Fast", "ll"])]), "protocol"
    if kind == 4:
        return _with(VALID, "nccl", "algorithms", ["tree"]), "ring"
    return _with(VALID, None, "gpu", rng.choice(["v100", "h300", "", "H100X"])), "GPU"


def bad_variant(rng: random.Random) -> Case:
    kind = rng.randrange(3)
    if kind == 0:  # both ways of giving the memory
        return _with(VALID, "variant", "total_memory_bytes", 10**11), "memory_gbytes"
    if kind == 1:  # below the power model's idle power
        return _with(VALID, "variant", "power_limit_w", rng.choice([50.0, 150])), "power_limit_w"
    return _with(_without(VALID, "variant", "boost_clock_mhz"), "variant", "name", ""), "name"


def missing_gpu(rng: random.Random) -> Case:
    return {k: v for k, v in VALID.items() if k != "gpu"}, "gpu"


def table_as_value(rng: random.Random) -> Case:
    table = rng.choice(["nvlink", "nic", "fabric", "nccl", "variant"])
    return {**VALID, table: rng.choice([3, "x", [1]])}, table


MUTATIONS: list[Callable[[random.Random], Case]] = [
    unknown_key, unknown_table, wrong_type, wrong_string_type, not_positive, negative_latency, zero_count,
    impossible_topology, bad_variant, missing_gpu, table_as_value]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_text(data: dict[str, Any]) -> str:
    """TOML of a cluster: top-level values first, then the tables (a table given as a non-table stays a value)."""
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and k in VALID and isinstance(VALID[k], dict)}
    lines = [f"{k} = {toml_value(v)}" for k, v in data.items() if k not in tables]
    for name, table in tables.items():
        lines += [f"[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(seed)
    return [rng.choice(MUTATIONS)(rng) for _ in range(count)]


@pytest.fixture
def no_launch(monkeypatch):
    """A configuration that passes would launch: make that a failure, and build nothing."""
    def launched(config):
        raise AssertionError("a bad cluster file was accepted and launched")
    monkeypatch.setattr(cli, "launch", launched)
    monkeypatch.setattr(cli, "_prepare_native_shim", lambda: None)


def one_line_error(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (argv, captured.err)
    assert len(lines) == 1 and lines[0].startswith("phantora: error: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def test_the_valid_cluster_is_valid(tmp_path, no_launch):
    path = tmp_path / "cluster.toml"
    path.write_text(toml_text(VALID))
    config, _ = cli.config_from_args(cli.build_parser().parse_args(["run", "--cluster", str(path), "--", __file__]))
    assert config.cluster.nodes == 4 and config.profile.spec.base is not None


@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_cluster_files_are_one_line_errors_naming_the_field(tmp_path, capsys, no_launch, seed):
    for i, (data, field) in enumerate(cases(seed, 60)):
        path = tmp_path / f"cluster{i}.toml"
        path.write_text(toml_text(data))
        command = rng_command(random.Random(seed * 1000 + i), path)
        line = one_line_error(capsys, command)
        assert field.lower() in line.lower(), (toml_text(data), line)


def rng_command(rng: random.Random, path: Path) -> list[str]:
    """Any simulating command reads the cluster file the same way."""
    return rng.choice([["run", "--cluster", str(path), "--", __file__],
                       ["torchrun", "--cluster", str(path), "--nproc-per-node", "gpu", __file__]])


BAD_FLAGS: list[tuple[list[str], str]] = [
    (["--nic-gbps", "0"], "--nic-gbps"), (["--nic-gbps", "-1"], "--nic-gbps"), (["--nic-gbps", "fast"], "--nic-gbps"),
    (["--nic-gbps", "nan"], "--nic-gbps"), (["--nic-gbps", "inf"], "--nic-gbps"),
    (["--gpus-per-node", "0"], "--gpus-per-node"), (["--gpus-per-node", "1.5"], "--gpus-per-node"),
    (["--gpus-per-node", "x"], "--gpus-per-node"), (["--host-time-scale", "0"], "--host-time-scale"),
    (["--host-contention", "lots"], "--host-contention"), (["--host-time", "wall"], "--host-time"),
    (["--nproc-per-node", "0"], "--nproc-per-node"), (["--nproc-per-node", "many"], "--nproc-per-node"),
    (["--nnodes", "0"], "--nnodes"), (["--nnodes", "1:4"], "--nnodes"), (["--nproc-per-node", "9"], "--nproc-per-node"),
    (["--gpus-per-node", "4", "--nnodes", "2", "--nproc-per-node", "2"], "--nproc-per-node"),
    (["--bogus-flag"], "--bogus-flag"), (["--gpu", "x100"], "GPU 'x100'"),
]


@pytest.mark.parametrize(("words", "field"), BAD_FLAGS)
def test_bad_flags_are_one_line_errors_naming_the_flag(capsys, no_launch, words, field):
    gpu = [] if words[0] == "--gpu" else ["--gpu", "h100"]
    line = one_line_error(capsys, ["torchrun", *gpu, *words, __file__])
    assert field in line, line


def test_gpu_counts_that_do_not_divide_the_cluster(tmp_path, capsys, no_launch):
    path = tmp_path / "cluster.toml"
    path.write_text(toml_text(_with(_with(VALID, None, "gpus_per_node", 6), "nic", "nics_per_node", 6)))
    line = one_line_error(capsys, ["torchrun", "--cluster", str(path), "--nnodes", "2", "--nproc-per-node", "4",
                                   __file__])
    assert "--nproc-per-node" in line
    line = one_line_error(capsys, ["torchrun", "--cluster", str(path), "--nnodes", "8", "--nproc-per-node", "6",
                                   __file__])
    assert "--nnodes" in line


def test_unreadable_cluster_files(tmp_path, capsys, no_launch):
    garbage = tmp_path / "garbage.toml"
    garbage.write_text("gpu = h100 [[[\n")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00gpu")
    for path, what in ((garbage, "not valid TOML"), (binary, "binary.toml"), (tmp_path / "none.toml", "does not exist"),
                       (tmp_path, "directory")):
        assert what in one_line_error(capsys, ["run", "--cluster", str(path), "--", __file__])
