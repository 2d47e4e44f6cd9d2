"""TorchTitan's own trainer (`-m torchtitan.train`), unmodified, under `phantora torchrun`: its debug models in each
parallelism, its mixture-of-experts models with expert parallelism, activation checkpointing, and pipeline
parallelism of the full-size Llama-3 8B. Needs the `torchtitan` extra (pip install -e '.[torchtitan]')."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("torchtitan", reason="TorchTitan is not installed (pip install -e '.[torchtitan]')")
pytest.importorskip("triton", reason="TorchTitan imports triton, which is not installed (the torchtitan extra has it)")

EXAMPLES = REPO / "examples" / "torchtitan"
LLAMA3 = EXAMPLES / "llama3_debug.toml"
DEEPSEEK = EXAMPLES / "deepseek_v3_debug.toml"
STEP = re.compile(r"^\[rank(\d+)\]:.*step:\s+(\d+)\s.*memory:\s+([\d.]+)GiB.*tps: ([\d,]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SMALL = ("--training.seq_len", "512", "--training.local_batch_size", "2", "--training.steps", "2")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small stand-in for TorchTitan's c4_test set (benchmarks/workloads/torchtitan/make_synthetic_c4.py)."""
    folder = tmp_path_factory.mktemp("c4_synthetic")
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "workloads" / "torchtitan" / "make_synthetic_c4.py"),
                    str(folder / "data.json"), "150000"], check=True, capture_output=True)
    return folder


@pytest.fixture(scope="module")
def even_dataset(dataset, tmp_path_factory):
    """The stand-in's first document, repeated: every data-parallel rank reads the same text, so each tokenizes
    as much as the others (models/host.py Note [Tokenizing on the host]) and no rank's host lags for its data."""
    folder = tmp_path_factory.mktemp("c4_even")
    first = (dataset / "data.json").read_text().splitlines()[0]
    (folder / "data.json").write_text((first + "\n") * 400)
    return folder


@pytest.fixture
def titan(torchrun, dataset, tmp_path):
    """`phantora torchrun --nproc-per-node N -m torchtitan.train --job.config_file CONFIG FLAGS`, on small steps."""
    def run(nproc: int, config, *flags: str):
        return torchrun(nproc, "-m", "torchtitan.train", "--job.config_file", str(config),
                        "--job.dump_folder", str(tmp_path / "dump"), "--training.dataset_path", str(dataset),
                        *SMALL, *flags)
    return run


def steps(run) -> dict[int, list[tuple[int, float, int]]]:
    """TorchTitan's own step lines, by rank: (step, memory GiB, tokens/s)."""
    found: dict[int, list[tuple[int, float, int]]] = {}
    for line in run.stdout.splitlines():
        match = STEP.match(ANSI.sub("", line))
        if match:
            rank, step, memory, tps = match.groups()
            found.setdefault(int(rank), []).append((int(step), float(memory), int(tps.replace(",", ""))))
    return found


def check_ran(run, *, unmodelled: set[str] = frozenset()) -> dict[int, list[tuple[int, float, int]]]:
    """The run ended well, every rank logged its steps with simulated numbers, the only ops without a cost model
    are `unmodelled`, and TorchTitan's closing sleep is not GPU idle time."""
    assert run.code == 0, run.stderr[-4000:]
    logged = steps(run)
    summary = run.summary
    assert sorted(logged) == list(range(summary["world_size"]))
    for rank_steps in logged.values():
        assert [s for s, _, _ in rank_steps] == [1, 2] and all(tps > 0 and mem > 0 for _, mem, tps in rank_steps)
    assert summary["complete"] and set(summary["generic_ops"]) == set(unmodelled)
    assert summary["asleep_s"] >= 1.99  # rank 0 sleeps 2 s before it exits ("for other ranks to complete")
    return logged


@pytest.mark.every_build
def test_fsdp(titan):
    check_ran(titan(2, LLAMA3))


def test_tensor_parallel(titan):
    check_ran(titan(2, LLAMA3, "--parallelism.tensor_parallel_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "1"))


@pytest.mark.parametrize("schedule", [
    "1F1B",
    pytest.param("GPipe", marks=pytest.mark.slow),
    pytest.param("Interleaved1F1B", marks=pytest.mark.slow),
    pytest.param("InterleavedZeroBubble", marks=pytest.mark.slow),
    pytest.param("ZBVZeroBubble", marks=pytest.mark.slow),
    pytest.param("DualPipeV", marks=pytest.mark.slow),  # forward and backward in two host threads at once
])
def test_pipeline_parallel(titan, schedule):
    check_ran(titan(2, LLAMA3, "--parallelism.pipeline_parallel_degree", "2", "--parallelism.data_parallel_shard_degree",
                    "1", "--parallelism.pipeline_parallel_schedule", schedule, "--training.local_batch_size", "4"))


@pytest.mark.slow
def test_context_parallel(titan):
    check_ran(titan(2, LLAMA3, "--parallelism.context_parallel_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "1"))


@pytest.mark.slow
def test_hsdp_and_tensor_times_pipeline_parallel(titan):
    check_ran(titan(4, LLAMA3, "--parallelism.data_parallel_replicate_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "2"))
    check_ran(titan(4, LLAMA3, "--parallelism.tensor_parallel_degree", "2", "--parallelism.pipeline_parallel_degree",
                    "2", "--parallelism.data_parallel_shard_degree", "1"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", [("full",), ("selective", "--activation_checkpoint.selective_ac_option", "op")])
def test_activation_checkpointing(titan, mode):
    check_ran(titan(2, LLAMA3, "--activation_checkpoint.mode", *mode))


MOE_KERNELS = {"triton._fill_indices_kernel"}
"""TorchTitan's own Triton kernel (its MoE token permutation): simulated, without a cost model."""


def test_deepseek_v3_with_expert_parallelism_is_consistent_and_repeats(titan):
    """runtime/routing.py Note [Simulated routing]: every rank's all-to-all split sizes agree, and the same run
    gives the same simulated numbers."""
    first = check_ran(titan(2, DEEPSEEK), unmodelled=MOE_KERNELS)
    assert first == steps(titan(2, DEEPSEEK))


@pytest.mark.slow
def test_llama4_with_expert_parallelism(titan):
    check_ran(titan(2, DEEPSEEK, "--model.name", "llama4"), unmodelled=MOE_KERNELS)


@pytest.mark.slow
def test_expert_parallelism_with_full_activation_checkpointing(titan):
    """The recomputed routers draw what their forwards drew: the saved and recomputed shapes agree."""
    check_ran(titan(2, DEEPSEEK, "--activation_checkpoint.mode", "full"), unmodelled=MOE_KERNELS)


@pytest.mark.slow
def test_expert_parallelism_4_on_8_gpus(titan):
    check_ran(titan(8, DEEPSEEK, "--parallelism.expert_parallel_degree", "4"), unmodelled=MOE_KERNELS)


@pytest.mark.slow
def test_pipeline_parallel_llama3_8b(titan):
    """The full-size model: its pipeline split deep-copies a model whose large buffers are fake CPU tensors
    (dispatch Note [Copying fake tensors])."""
    run = titan(2, LLAMA3, "--model.flavor", "8B", "--parallelism.pipeline_parallel_degree", "2",
                "--parallelism.data_parallel_shard_degree", "1", "--training.seq_len", "256")
    logged = check_ran(run)
    assert min(mem for rank_steps in logged.values() for _, mem, _ in rank_steps) > 30  # half of 8B + AdamW each


@pytest.mark.slow
def test_fsdp_over_two_nodes_runs_one_representative_rank(torchrun, even_dataset, tmp_path):
    """TorchTitan builds the mesh dimensions it never communicates over (pp, cp, tp of degree 1) on torch's fake
    backend, which exchanges nothing: one process stands for all four ranks (protocol/symmetry.py Note
    [Representative ranks]), and rank 0 logs what it logs when every rank runs. The ranks read even data: a
    mirror is taken to tokenize what its representative tokenizes."""
    def two_nodes(*ranks: str):
        return torchrun(2, "--nnodes", "2", "--host-contention", "none", *ranks, "-m", "torchtitan.train",
                        "--job.config_file", str(LLAMA3), "--job.dump_folder", str(tmp_path / "dump"),
                        "--training.dataset_path", str(even_dataset), *SMALL,
                        "--parallelism.data_parallel_shard_degree",
                        "4")
    auto, every = two_nodes(), two_nodes("--ranks", "all")
    assert auto.code == 0, auto.stderr[-4000:]
    assert (auto.summary["representative_ranks"], every.summary["representative_ranks"]) == (1, 4)
    assert "starting again" not in auto.stderr
    assert steps(auto) == {0: check_ran(every)[0]}
