"""torch.compile and CUDA graphs end to end (runtime/compile.py, runtime/inductor.py, runtime/cuda_graphs.py)."""

import json

import pytest

from conftest import REPO, SCRIPTS

from phantora.specs import load_profile

pytestmark = pytest.mark.slow


@pytest.mark.every_build
def test_a_compiled_step_runs_inductors_fused_kernels(phantora):
    eager = phantora(str(SCRIPTS / "compile_probe.py"), "--mode", "eager")
    compiled = phantora(str(SCRIPTS / "compile_probe.py"), "--mode", "default")
    assert eager.code == 0, eager.stderr
    assert compiled.code == 0, compiled.stderr
    eager_seen, seen = eager.tagged_json("COMPILE"), compiled.tagged_json("COMPILE")
    assert seen["orig_mod"] and seen["state_dict_keys"] == ["_orig_mod.tok.weight", "_orig_mod.pos.weight"]
    # one region, its forward and backward graphs as Inductor's kernels; nothing fell back to eager
    summary = compiled.summary
    assert summary["compile"]["regions"] == 1 and summary["compile"]["graphs"] == 2
    assert summary["compile"]["eager_regions"] == {} and summary["compile"]["compilation_time_predicted"] is False
    assert "compilation time not predicted" in compiled.stderr
    # fused: no eager norm or loss kernels, fewer kernels in all (the same GEMMs, optimizer and set-up)
    assert "norm" in eager.summary["kernel_time_s_by_class"] and "norm" not in summary["kernel_time_s_by_class"]
    assert summary["kernels"] < eager.summary["kernels"] - 60
    assert summary["kernel_sources"].get("generic", 0) == 0
    assert summary["flops"] == pytest.approx(eager.summary["flops"], rel=0.01)  # the same GEMMs and attention
    # fused kernels move less: less GPU time (the step itself is host-bound at this size, where a compiled graph's
    # call costs about as much as the launches it saves)
    gpu_s = lambda run: sum(run.summary["kernel_time_s_by_class"].values())  # noqa: E731
    assert gpu_s(compiled) < 0.9 * gpu_s(eager)
    assert seen["peak_bytes"] < eager_seen["peak_bytes"]  # the partitioner saves less than eager autograd
    # no compile warning where nothing is compiled
    assert eager.summary.get("compile") is None and not any("torch.compile" in w for w in eager.summary["warnings"])


def test_reduce_overhead_replays_each_graph_with_one_launch(phantora):
    default = phantora(str(SCRIPTS / "compile_probe.py"), "--mode", "default")
    graphed = phantora(str(SCRIPTS / "compile_probe.py"), "--mode", "reduce-overhead")
    assert graphed.code == 0, graphed.stderr
    assert graphed.tagged_json("COMPILE")["step_s"] < default.tagged_json("COMPILE")["step_s"]
    assert graphed.summary["kernels"] >= default.summary["kernels"]  # the same kernels, and the input copies


def test_compiled_graphs_take_the_memory_inductors_code_takes(phantora):
    """runtime/inductor.py Note [Inductor's memory in a plan]: a kernel writing over a buffer at its last use takes
    no block of its own, and a backward graph frees each saved activation at its last use; the numbers are a real
    H200's (data/h200/memory/compiled_graphs/)."""
    run = phantora(str(REPO / "benchmarks" / "memory" / "compiled_graph_memory.py"))
    assert run.code == 0, run.stderr
    measured = json.loads((REPO / "data" / "h200" / "memory" / "compiled_graphs" / "result.json").read_text())
    assert run.tagged_json("MEMORY") == measured
    assert run.summary["compile"]["eager_regions"] == {}


def test_a_cuda_graph_replay_costs_one_launch(phantora):
    run = phantora(str(SCRIPTS / "cuda_graph_probe.py"))
    assert run.code == 0, run.stderr
    seen = run.tagged_json("GRAPH")
    assert seen["kernels"] == 40 and seen["shape"] == [64, 64] and not seen["capturing"]
    assert seen["replay_us"] < 0.5 * seen["eager_us"]  # 40 small kernels: the host's launches dominate eagerly


def test_blocks_compiled_one_by_one_take_inputs_that_require_grad(phantora):
    """A compiled region whose input is a non-leaf that requires grad: Dynamo's fake copy of it stays Dynamo's
    (runtime/dispatch.py Note [Foreign fake modes]), and the regions run as Inductor's kernels."""
    run = phantora(str(SCRIPTS / "compile_blocks.py"))
    assert run.code == 0, run.stderr
    assert run.tagged_json("BLOCKS") == {"grad": [512, 128]}
    assert run.summary["compile"]["regions"] >= 1 and run.summary["compile"]["eager_regions"] == {}


def test_a_compiled_call_costs_its_call_its_inputs_and_each_kernel_it_launches(phantora):
    """models/host.py `compiled_*_ns`: Inductor's generated code launches its kernels without PyTorch's per-op
    dispatch, and the call itself (guards, AOTAutograd's wrappers) costs the host per call and per input."""
    run = phantora(str(SCRIPTS / "compiled_host_probe.py"), extra=("--host-contention", "h200-vm"))
    assert run.code == 0, run.stderr
    seen = run.tagged_json("COMPILED_HOST")
    kernels = run.summary["compile"]["kernels"]  # one graph: no backward is planned under no_grad
    assert run.summary["compile"]["graphs"] == 1 and kernels >= 1
    C = load_profile("h200").host.value
    assert seen["call_ns"] == C.compiled_call_ns + seen["inputs"] * C.compiled_input_ns + kernels * C.compiled_launch_ns
