"""Determinism at scale: random real-time delays in every rank and in the coordinator server (transport/delay.py)
change the OS's scheduling of the run, never a simulated number."""

from __future__ import annotations

import json

import pytest

from conftest import SCRIPTS
from phantora.transport.delay import DELAY_ENV_VAR, SEED_ENV_VAR

GPUS_PER_NODE = 8
SIMULATED = ("simulated_time_s", "gpu_busy_fraction", "nccl_s", "exposed_comm_s", "host_blocked_s", "kernels",
             "nccl_calls", "per_rank")


def simulated_numbers(summary: dict) -> dict:
    return {key: summary[key] for key in SIMULATED}


@pytest.mark.slow
@pytest.mark.parametrize("ranks,processes", [(16, "all"), (64, "auto")])
def test_results_are_bit_identical_under_random_scheduling(torchrun, ranks, processes):
    """A tiny FSDP2 job, twice, each with its own seeded pattern of 0-2 ms delays before every batch a rank sends
    and every batch the server takes: the summary's simulated numbers and the trace are the same to the bit.
    `ranks` is a multiple of a node's 8 GPUs; `processes`: every rank runs, or representative ranks (an FSDP
    x TP job folds onto one process after one restart; docs/launcher.md)."""
    nodes = max(1, ranks // GPUS_PER_NODE)
    per_node = ranks // nodes
    mode = "fsdp" if processes == "all" else "fsdp_tp"
    runs = [torchrun(per_node, "--nnodes", str(nodes), "--ranks", processes, str(SCRIPTS / "parallel_train.py"),
                     "--mode", mode,
                     "--dim", "128", "--layers", "2", "--steps", "2",
                     env={DELAY_ENV_VAR: "2", SEED_ENV_VAR: str(seed)}, timeout=1200) for seed in (1, 2)]
    for run in runs:
        assert run.code == 0, run.stderr[-3000:]
        assert run.summary["world_size"] == ranks
    first, second = (simulated_numbers(run.summary) for run in runs)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert (runs[0].out_dir / "trace.json").read_bytes() == (runs[1].out_dir / "trace.json").read_bytes()
