"""FSDP2's reshard-after-forward memory, end to end under `phantora torchrun`."""

from conftest import SCRIPTS, rank_json

WORKSPACE = 32 * 2**20
"""PyTorch's cuBLAS workspace per thread and stream on an H200 (compute capability 9.0)."""


def test_fsdp2_frees_unsharded_parameters_after_each_layer(torchrun):
    """`fully_shard` with bf16 compute frees each layer's unsharded parameters
    (`untyped_storage().resize_(0)`) after its forward and re-allocates them (`resize_(n)`) at the
    next all-gather. Were the resize not seen, every layer's unsharded weights would stay allocated:
    the forward would end LAYERS x 32 MiB higher and the peak would grow with the layer count."""
    run = torchrun(2, str(SCRIPTS / "fsdp_memory.py"))
    assert run.code == 0, run.stderr
    results = rank_json(run, "MEM")
    assert set(results) == {0, 1}
    for r in results.values():
        world, dim, layers, tokens = r["world"], r["dim"], r["layers"], r["tokens"]
        sharded = dim * dim * 4 // world          # one layer's fp32 parameter shard (and gradient shard)
        unsharded = dim * dim * 2                 # one layer's bf16 unsharded weight, 32 MiB
        act = tokens * dim * 2                    # one bf16 activation
        for name, step in r["steps"].items():
            # the cuBLAS workspaces (runtime/memory_tracker.py Note [cuBLAS workspaces]): the main
            # thread's at the first step's first GEMM, the autograd engine's at its first backward GEMM
            first = name == "0"
            assert step["before"] == layers * sharded + tokens * dim * 4 + (0 if first else 2 * WORKSPACE)
            # after the forward only activations remain: the input cast to bf16 and each layer's output
            assert step["after_forward"] - step["before"] == (layers + 1) * act + (WORKSPACE if first else 0)
            # at the peak (the last layer's copy-out): this layer's all-gather buffer and unsharded
            # weight, and the previous layer's all-gather buffer, which `wait_for_unshard`'s local
            # `prev_all_gather_state` keeps alive until it returns; plus the activations so far
            assert step["peak_forward"] - step["before"] == 3 * unsharded + layers * act + (WORKSPACE if first else 0)
            # after the backward: the fp32 gradient shards and the output
            assert step["after_backward"] - step["before"] == layers * sharded + act + (2 * WORKSPACE if first else 0)
