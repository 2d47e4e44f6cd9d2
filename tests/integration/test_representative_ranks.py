"""Representative ranks (protocol/symmetry.py Note [Representative ranks]): a job of several nodes runs a
process only for the ranks its process groups need, and gives the answer of the run of every rank."""

import pytest

from conftest import SCRIPTS, rank_json

pytestmark = pytest.mark.slow

SMALL = ("--dim", "256", "--layers", "2", "--steps", "3")
SAME = ("simulated_time_s", "flops", "kernels", "nccl_calls", "peak_allocated_gib", "peak_reserved_gib")
MEANS = ("gpu_busy_fraction", "compute_s", "nccl_s", "exposed_comm_s", "nccl_wait_s", "host_blocked_s")
"""Means over ranks: over 8 or 16 equal values they differ from the value in the last bit."""


def nodes_of_4(torchrun, mode: str, nodes: int, *ranks: str):
    run = torchrun(4, "--nnodes", str(nodes), "--host-contention", "none", *ranks, str(SCRIPTS / "parallel_train.py"),
                   "--mode", mode, *SMALL)
    assert run.code == 0, run.stderr
    return run


@pytest.mark.parametrize("mode,nodes", [("fsdp", 2), ("fsdp_tp", 2), ("fsdp", 4)])
def test_representatives_give_every_rank_s_answer(torchrun, mode, nodes):
    """FSDP over two or four nodes of 4 needs one process, and so does FSDP x TP 2 (the launcher starts again
    when the first run uses the TP group, with both mesh axes folded). Their numbers are those of the run of all
    8 (16) ranks, bit for bit."""
    world = 4 * nodes
    auto, every = nodes_of_4(torchrun, mode, nodes), nodes_of_4(torchrun, mode, nodes, "--ranks", "all")
    processes = 1
    assert auto.summary["representative_ranks"] == processes and every.summary["representative_ranks"] == world
    assert (f"starting again with 1 of {world}" in auto.stderr) == (mode == "fsdp_tp")
    mirrored, reference = rank_json(auto, "RESULT"), rank_json(every, "RESULT")
    assert sorted(mirrored) == list(range(processes)) and sorted(reference) == list(range(world))
    for rank, result in mirrored.items():
        assert result == reference[rank]
    assert {k: auto.summary[k] for k in SAME} == {k: every.summary[k] for k in SAME}
    assert {k: auto.summary[k] for k in MEANS} == pytest.approx({k: every.summary[k] for k in MEANS}, rel=1e-12)
    assert auto.summary["kernel_time_s_by_class"] == pytest.approx(every.summary["kernel_time_s_by_class"], rel=1e-12)
    assert auto.summary["per_rank"] == every.summary["per_rank"][:processes]


def test_a_pipeline_s_transfers_make_every_rank_run(torchrun):
    """Stage r sends to stage r+1: no rank can stand for another, and the refinements end at every rank."""
    run = torchrun(2, "--nnodes", "2", "--host-contention", "none", str(SCRIPTS / "parallel_train.py"),
                   "--mode", "pp", "--layers", "4", "--dim", "256", "--steps", "2")
    assert run.code == 0, run.stderr
    assert run.summary["representative_ranks"] == 4
    assert sorted(rank_json(run, "RESULT")) == [0, 1, 2, 3]
