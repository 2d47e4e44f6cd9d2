"""Megatron-core's training loop (examples/megatron_core_gpt.py), unmodified, under `phantora torchrun`."""

import collections
import json
import re

import pytest

from conftest import REPO

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e '.[megatron]')")

EXAMPLE = str(REPO / "examples" / "megatron_core_gpt.py")
TINY = ("--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "256", "--vocab-size", "1024",
        "--micro-batch-size", "2", "--train-iters", "2")
ITERATION = re.compile(r"iteration\s+(\d+)/(\d+) \| elapsed time per iteration \(ms\): ([\d.]+)")


def iteration_times_ms(stdout: str, rank: int) -> list[float]:
    """The elapsed times the example's last rank logs, one per iteration."""
    times = []
    for line in stdout.splitlines():
        if line.startswith(f"[rank{rank}]:") and (m := ITERATION.search(line)):
            times.append(float(m.group(3)))
    return times


def nccl_calls_by_name(out_dir) -> collections.Counter:
    trace = json.loads((out_dir / "trace.json").read_text())
    return collections.Counter(e["name"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "nccl")


def run_example(torchrun, nproc: int, *flags: str):
    run = torchrun(nproc, "--host-contention", "none", EXAMPLE, *TINY, *flags)
    assert run.code == 0, run.stderr[-4000:]
    times = iteration_times_ms(run.stdout, nproc - 1)
    assert len(times) == 2 and all(t > 0 for t in times), run.stdout[-4000:]
    assert run.summary["complete"] and run.summary["world_size"] == nproc
    return run


def test_tensor_and_sequence_parallel_with_megatron_adam(torchrun):
    """TP=2 with sequence parallelism: activations all-gathered and reduce-scattered between the TP ranks;
    Megatron's optimizer, its gradient norm without Apex (torch.tensor of GPU scalars)."""
    run = run_example(torchrun, 2, "--tp", "2", "--sequence-parallel", "--num-layers", "2", "--global-batch-size", "4")
    calls = nccl_calls_by_name(run.out_dir)
    assert calls["all_gather"] > 0 and calls["reduce_scatter"] > 0
    assert run.summary["placeholder_reads"][".item()"] > 0  # the gradient norm's reads


@pytest.mark.every_build
def test_tensor_parallel_with_torch_adam(torchrun):
    run_example(torchrun, 2, "--tp", "2", "--num-layers", "2", "--global-batch-size", "4", "--optimizer", "torch")


def test_pipeline_with_virtual_stages(torchrun):
    """PP=2 with 2 model chunks per rank: the interleaved 1F1B schedule, activations sent between stages."""
    run = run_example(torchrun, 2, "--pp", "2", "--vpp", "2", "--num-layers", "4", "--global-batch-size", "8")
    calls = nccl_calls_by_name(run.out_dir)
    assert any("send" in name for name in calls) and any("recv" in name for name in calls)


def test_data_parallel_with_distributed_optimizer_and_overlap(torchrun):
    """PP=2 x DP=2: Megatron's DDP reduce-scatters gradients and all-gathers parameters, overlapped."""
    run = run_example(torchrun, 4, "--pp", "2", "--num-layers", "2", "--global-batch-size", "8",
                      "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather")
    calls = nccl_calls_by_name(run.out_dir)
    assert calls["coalesced[reduce_scatter]"] > 0 and calls["coalesced[all_gather]"] > 0


def test_mixture_of_experts_with_expert_parallelism(torchrun):
    """4 experts over EP=2 with the alltoall dispatcher, tokens dropped and padded to each expert's capacity: the
    exchanged sizes follow from the configuration alone. (Dropless routing needs the routing map's values:
    docs/runtime.md, Megatron-core.)"""
    run = run_example(torchrun, 2, "--num-experts", "4", "--ep", "2", "--moe-capacity-factor", "1.0",
                      "--num-layers", "2", "--global-batch-size", "4")
    assert nccl_calls_by_name(run.out_dir)["all_to_all"] > 0
