"""Which ranks the fork server may fork (cli/fork_server.py), and its switch."""

import pytest

from phantora.cli.fork_server import (DEFAULT, PER_RANK, ForkServer, ForkServerError, common_environment, fork_server_enabled,
                                      intra_op_threads)


def test_the_switch():
    assert fork_server_enabled({}) == (DEFAULT == "1")
    assert fork_server_enabled({"PHANTORA_FORK_SERVER": "1"})
    assert not fork_server_enabled({"PHANTORA_FORK_SERVER": "0"})
    with pytest.raises(ForkServerError, match="PHANTORA_FORK_SERVER must be 0 or 1, got 'yes'"):
        fork_server_enabled({"PHANTORA_FORK_SERVER": "yes"})


def test_torchs_thread_count_comes_from_the_environment_as_torch_reads_it():
    assert intra_op_threads({"OMP_NUM_THREADS": "1"}) == 1
    assert intra_op_threads({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "4"}) == 4  # MKL's wins, as in torch
    assert intra_op_threads({}) is None  # torch would count the cores: started by exec
    assert intra_op_threads({"OMP_NUM_THREADS": "0"}) is None and intra_op_threads({"OMP_NUM_THREADS": "4,2"}) is None


def test_only_ranks_sharing_the_start_up_environment_are_forked():
    rank0 = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "RANK": "0", "PHANTORA_RUN_CONFIG": "a"}
    forks = ForkServer(enabled=True)
    forks._env = common_environment(rank0)  # as its start with rank 0 leaves it
    assert forks._env == {"PATH": "/bin", "OMP_NUM_THREADS": "1"} and {"RANK", "PHANTORA_RUN_CONFIG"} <= PER_RANK
    assert forks.can_fork({**rank0, "RANK": "1", "PHANTORA_RUN_CONFIG": "b"})
    assert not forks.can_fork({**rank0, "PATH": "/usr/bin"})  # read when the interpreter starts
    assert not forks.can_fork({**rank0, "OMP_NUM_THREADS": ""})
