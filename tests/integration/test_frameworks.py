"""The framework examples (examples/*.py) run unmodified under Phantora, end to end, on tiny models, and print
their own step times in simulated time (issue: real frameworks, unmodified). Each needs its framework
installed (`pip install -e '.[frameworks]'`) and is skipped with the reason otherwise."""

import json

import pytest

from conftest import REPO

EXAMPLES = REPO / "examples"


def result(run) -> dict:
    """The example's final JSON line (rank 0's under torchrun)."""
    for line in run.stdout.splitlines():
        if '{"script"' in line:
            return json.loads(line[line.index('{"script"'):])
    raise AssertionError(f"no result line:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")


def library_call_ns(run) -> int:
    """Rank 0's host time charged for torch's distributed libraries' calls (FSDP's hooks, DTensor's entries)."""
    result = json.loads((run.out_dir / "rank0" / "result.json").read_text())
    return result["host_ns_by_term"].get("torch library calls", 0)


def check(run, script: str, *, min_step_ms: float = 0.1) -> dict:
    assert run.code == 0, run.stderr[-4000:]
    found = result(run)
    assert found["script"] == script
    assert found["step_s_median"] * 1e3 > min_step_ms and found["max_mem_alloc_gib"] > 0
    assert run.summary["complete"]
    return found


@pytest.mark.parametrize("extra", [pytest.param([], marks=pytest.mark.every_build), ["--moe", "mixtral"], ["--moe", "qwen2_moe"]],
                         ids=["llama", "mixtral", "qwen2_moe"])
def test_hf_loop(phantora, extra):
    """Mixture-of-experts layers run their experts with `torch._grouped_mm` on float32 weights under autocast, which a
    GPU runs as one GEMM per expert (handlers.py Note [Grouped GEMMs off the fast path])."""
    pytest.importorskip("transformers")
    run = phantora(str(EXAMPLES / "hf_llama_loop.py"), *extra)
    check(run, "hf_llama_loop")
    if extra:
        assert '"aten.mm.out"' in (run.out_dir / "rank0" / "ops.jsonl").read_text()


def test_hf_trainer_accumulation_and_checkpointing(phantora):
    """Transformers takes SDPA's causal path with grouped key/value heads, as on a GPU: no mask, no repeated heads
    (runtime/library_probes.py Note [Library probes for tracing])."""
    pytest.importorskip("transformers")
    run = phantora(str(EXAMPLES / "hf_trainer.py"), "--grad-accum", "2", "--checkpointing", "--seq", "1024",
                   "--heads", "8", "--kv-heads", "2")
    check(run, "hf_trainer")
    for line in (run.out_dir / "rank0" / "ops.jsonl").read_text().splitlines():
        op = json.loads(line)
        if "_scaled_dot_product_cudnn_attention.default" in op.get("sig", ""):
            query, key, _, mask = op["args"][:4]
            assert mask is None and key["T"][0][1] == 2, op["args"]


def test_hf_trainer_ddp(torchrun):
    pytest.importorskip("transformers")
    run = torchrun(2, str(EXAMPLES / "hf_trainer.py"))
    check(run, "hf_trainer")
    assert run.summary["nccl_calls"] > 0


def test_accelerate_single_gpu(phantora):
    pytest.importorskip("accelerate")
    check(phantora(str(EXAMPLES / "accelerate_train.py")), "accelerate_train")


@pytest.mark.parametrize("version", [pytest.param("1", marks=pytest.mark.every_build), "2"])  # FSDP1: no_dispatch
def test_accelerate_fsdp(torchrun, version):
    """FSDP through Accelerate's environment, as `accelerate launch` with an FSDP config sets it."""
    pytest.importorskip("accelerate")
    env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": version, "ACCELERATE_MIXED_PRECISION": "bf16",
           "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "LlamaDecoderLayer"}
    run = torchrun(2, str(EXAMPLES / "accelerate_train.py"), env=env)
    check(run, "accelerate_train")
    assert run.summary["nccl_calls"] > 0
    assert library_call_ns(run) > 0  # FSDP1's hooks and FSDP2's calls pay their Python (models/host.py)


@pytest.mark.parametrize("strategy,ranks", [pytest.param("auto", 1, marks=pytest.mark.every_build), ("ddp", 2), ("fsdp", 2)])
def test_lightning(torchrun, strategy, ranks):
    pytest.importorskip("lightning")
    run = torchrun(ranks, str(EXAMPLES / "lightning_train.py"), "--strategy", strategy)
    check(run, "lightning_train")
    assert (library_call_ns(run) > 0) == (strategy == "fsdp")  # Lightning's FSDP is FSDP1: its hooks pay
    # the progress bar's own thread sleeps in real time: the run is steps, not minutes
    assert run.summary["simulated_time_s"] < 5


@pytest.mark.parametrize("zero,extra", [(1, []), (2, []), pytest.param(3, [], marks=pytest.mark.every_build),
                                        (2, ["--torch-adam", "--grad-accum", "2"])],
                         ids=["zero1-fused", "zero2-fused", "zero3-fused", "zero2-torch-adam-accum"])
def test_deepspeed(torchrun, zero, extra):
    pytest.importorskip("deepspeed")
    run = torchrun(2, str(EXAMPLES / "deepspeed_train.py"), "--zero", str(zero), *extra)
    check(run, "deepspeed_train")
    if "--torch-adam" not in extra:  # FusedAdam runs as PyTorch's fused Adam kernel (Note [CUDA extensions])
        ops = (run.out_dir / "rank0" / "ops.jsonl").read_text()
        assert "aten._fused_adamw_" in ops or "aten._fused_adam_" in ops
