"""benchmarks/e2e/published/torchtitan_llama3.py: what it reads from TorchTitan's log."""

import pytest

from benchmarks.e2e.published import torchtitan_llama3 as published

# TorchTitan 0.2.2's step line, colours and all, as two ranks print it.
LINE = ("[rank{rank}]:[titan] 2026-11-26 07:48:30,562 - root - INFO - \x1b[31mstep: {step:2}  \x1b[32mloss:  0.00000  "
        "\x1b[38;2;180;60;0mgrad_norm:  0.0000  \x1b[38;2;54;234;195mmemory: {memory:.2f}GiB(77.21%)  "
        "\x1b[34mtps: {tps:,}  \x1b[36mtflops: 354.78  \x1b[35mmfu: 35.87%\x1b[39m")


def log(steps: dict[int, tuple[float, int]]) -> str:
    return "\n".join(LINE.format(rank=rank, step=step, memory=memory, tps=tps)
                     for step, (memory, tps) in steps.items() for rank in (0, 1))


def test_logs_that_cover_warm_up_steps_are_left_out_of_throughput_and_memory():
    """TorchTitan logs steps 1, 10, 20, 30 (every 10th, as published); a log covers the steps since the last."""
    lines = published.logged_steps(log({1: (90.0, 9000), 10: (82.0, 5500), 20: (81.2, 5576), 30: (81.2, 5570)}),
                                   published.PUBLISHED[0])
    found = published.prediction(lines)
    assert published.LOG_FREQ == 10 and published.first_steady_log() == 20
    assert found["tokens_per_s_per_gpu"] == 5573  # steps 11-30; step 10's log covers warm-up steps 2 and 3
    assert found["memory_gib"] == 81.2 and found["ranks_logging"] == 2


def test_too_few_steps_is_an_error_naming_the_option():
    lines = published.logged_steps(log({1: (80.0, 6000), 10: (80.0, 6000)}), published.PUBLISHED[0])
    with pytest.raises(RuntimeError, match="--steps"):
        published.prediction(lines)


def test_the_command_is_the_published_configuration_under_the_cluster_file():
    words = published.phantora_command(published.PUBLISHED[1], 20, "/tmp/out", [])
    assert words[words.index("--cluster") + 1] == "benchmarks/e2e/published/h100_96gb_grand_teton.toml"
    assert words[words.index("--nnodes") + 1] == "16" and words[words.index("--nproc-per-node") + 1] == "8"
    assert words[words.index("--parallelism.data_parallel_shard_degree") + 1] == "128"
    assert words[words.index("--training.local_batch_size") + 1] == "2"
    assert words[words.index("--activation_checkpoint.mode") + 1] == "selective"
    assert "--compile.no-enable" in words and not any("float8" in word for word in words)
    assert words[words.index("--metrics.log_freq") + 1] == "10"  # as published: the host runs ahead between logs
