"""The host model's terms beyond ops, charged by the runtime (models/host.py, runtime/python_costs.py)."""

import pytest
from conftest import SCRIPTS

from phantora.specs import load_profile

C = load_profile("h200").host.value
MEAN_HOST = ("--host-contention", "h200-vm")  # one rank on the measured hosts: the constants as they are


def test_module_optimizer_clip_loader_and_backward_costs(phantora):
    run = phantora(str(SCRIPTS / "host_costs_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("HOST")
    add = C.launch_ns + C.framework_ns  # in place: no output allocated
    assert took["adds"] == took["adds_again"] == 100 * add
    assert took["modules"] == 100 * C.module_call_ns  # Identity issues no op
    assert took["nested_modules"] == 100 * 5 * C.module_call_ns  # each module of the nest, once
    assert took["global_module_hooks"] == 0  # every module call stays on torch's fast path
    assert took["zero_grad"] == C.zero_grad_ns + 3 * C.zero_grad_per_param_ns
    assert took["optimizer_step"] == C.optimizer_step_ns
    assert took["clip"] == C.grad_norm_ns + C.python_element_ns  # no gradients: `torch.tensor(0.0)`, one element
    assert took["next"] == C.dataloader_next_ns + 2 * C.python_element_ns  # collate: `torch.tensor` of two ints
    # the loader's contention is paid by the ops issued next, each at most doubled
    assert took["adds_after_next"] == 100 * add + min(C.dataloader_contention_ns, 100 * add)
    # backward of sin(x).sum(): the grad seed (ones_like, from Python), then three nodes run by the
    # engine: SumBackward0 (expand, a view), SinBackward0 (cos, mul), AccumulateGrad (detach, a view)
    seed = C.launch_ns + C.framework_ns + C.alloc_output_ns
    engine = 3 * C.autograd_node_ns + 2 * C.view_ns + 2 * (C.launch_ns + C.alloc_output_ns)
    assert took["backward"] == seed + engine
    # a custom Function's backward is Python the engine calls: its op pays the Python binding as in a forward
    # (runtime/issuer.py); SumBackward0's expand and AccumulateGrad's detach stay the engine's
    custom = 3 * C.autograd_node_ns + 2 * C.view_ns + (C.launch_ns + C.framework_ns + C.alloc_output_ns)
    assert took["custom_backward"] == seed + custom


def test_tensor_ops_on_the_host_cost_the_bytes_they_move(phantora):
    """models/host.py Note [Tensor ops on the host]: real and fake CPU tensors alike; a view moves nothing."""
    run = phantora(str(SCRIPTS / "host_costs_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("HOST")
    mask, tokens = 2048 * 2048, 16 * 2048 * 8

    def moved(nbytes: int) -> int:
        return round(nbytes / C.cpu_bytes_per_s * 1e9)

    # the clone (read, write) then the stack (two reads, one write of twice the size)
    assert took["stack_masks"] == moved(2 * mask) + moved(4 * mask)
    assert took["stack_tokens"] == moved(2 * tokens) + moved(4 * tokens)
    assert took["pin_masks"] == moved(2 * mask)
    assert took["view_tokens"] == 0


def test_a_tensor_built_from_python_data_costs_its_elements(phantora):
    """models/host.py Note [Tensors from Python data]: a typed constructor and `torch.tensor` of nested lists pay per
    element stored; a tensor sharing a numpy array's memory stored nothing."""
    run = phantora(str(SCRIPTS / "host_costs_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("HOST")
    assert took["sample_ids"] == 4097 * C.python_element_ns > 0
    assert took["batch_ids"] == 2 * 2048 * C.python_element_ns
    assert took["numpy_ids"] == 0


def test_a_tokenizer_costs_the_characters_it_reads_and_the_tokens_it_returns(phantora):
    """models/host.py Note [Tokenizing on the host]: `tokenizers` imported under the simulation is charged; a pair's
    second text and a batch's every text count."""
    run = phantora(str(SCRIPTS / "host_costs_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("HOST")
    chars, short = took["text_chars"], 100
    assert took["tokenize"] == C.tokenize_char_ns * chars + C.tokenize_token_ns * took["text_tokens"] > 0
    assert took["tokenize_pair"] == C.tokenize_char_ns * (chars + short) + C.tokenize_token_ns * took["pair_tokens"]
    assert took["tokenize_batch"] == (C.tokenize_char_ns * (chars + short)
                                      + C.tokenize_token_ns * (took["text_tokens"] + took["short_tokens"]))


def test_the_summary_says_what_the_host_model_charged_by_term(phantora):
    """summary.json `host_work_s_by_term` and the console's "host work": each charge counted to its term."""
    run = phantora(str(SCRIPTS / "host_costs_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took, work = run.tagged_json("HOST"), run.summary["host_work_s_by_term"]
    # the probe's 100 Identity calls and 100 nests of 5, besides the setup's module calls
    assert work["module calls"] * 1e9 >= took["modules"] + took["nested_modules"]
    assert work["tokenizer"] * 1e9 >= took["tokenize"] + took["tokenize_pair"] + took["tokenize_batch"]
    assert work["data loader"] * 1e9 == pytest.approx(C.dataloader_next_ns)  # one batch fetched
    assert {"ops", "optimizer", "autograd nodes", "host tensor ops", "syncs"} <= work.keys()
    assert list(work.values()) == sorted(work.values(), reverse=True)
    assert "host work" in run.stdout + run.stderr


def test_a_priced_librarys_python_costs_its_measured_price(phantora):
    """models/python_prices.py Note [Library Python]: each call of a DeepSpeed function costs the host its price
    (the prices stand for the measured hosts, as the constants do); nothing without the prices."""
    run = phantora(str(SCRIPTS / "library_python_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("PROBE")
    assert took["priced_ns"] > 0
    assert abs(took["elapsed_ns"] - took["priced_ns"]) < 1000


def test_ops_a_priced_function_issues_by_operator_syntax_are_in_its_price(phantora):
    """runtime/python_prices.py Note [Ops in a price]: Transformers' rotary embedding costs its price and the C
    functions it calls, not the kernels and views it issues by operator syntax beside them."""
    run = phantora(str(SCRIPTS / "library_ops_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("PROBE")
    assert took["priced_ns"] > 0 and took["calls_ns"] > 0
    assert abs(took["elapsed_ns"] - took["priced_ns"] - took["calls_ns"]) < 1000
    assert run.summary["ops_in_library_python"] >= 100 * 12


def test_selective_checkpointing_costs_its_dispatch_modes_python(phantora):
    """Per-op selective checkpointing runs a Python `__torch_dispatch__` around every op of the checkpointed forward
    (models/python_prices.py Note [Library Python]: torch/utils/checkpoint.py is priced): at least one for each
    layer's GEMM, beyond what the same forward costs checkpointed without a policy."""
    run = phantora(str(SCRIPTS / "selective_checkpoint_probe.py"), extra=MEAN_HOST)
    assert run.code == 0, run.stderr
    took = run.tagged_json("PROBE")
    assert took["dispatch_ns"] > 0
    assert took["selective_ns"] - took["full_ns"] >= took["layers"] * took["dispatch_ns"]
    assert run.summary["host_work_s_by_term"]["library Python"] > 0
