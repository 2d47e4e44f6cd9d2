"""Library calls charged by the path they take (runtime/python_costs.py, models/host.py), and module calls charged
without a global module hook (runtime/module_calls.py)."""

import inspect
from types import SimpleNamespace
from typing import Callable

import pytest
import torch

from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

from phantora.models.host import HostModel
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value
LIBRARY_CALL_NS = H200_HOST.library_call_ns
ACCUMULATING_CALL_NS = H200_HOST.accumulating_call_ns
from phantora.runtime.module_calls import charge_module_calls
from phantora.runtime.python_costs import ENCODER_INPUTS, _charge_encoders, _library_charge, _library_owner


def charge(name: str, owner) -> int:
    paid: list[int] = []
    _library_charge(HostModel(H200_HOST), name, paid.append)(owner)
    return paid[0]


def root(*reduce_grads: bool):
    states = [SimpleNamespace(_fsdp_param_groups=[SimpleNamespace(reduce_grads=r)]) for r in reduce_grads]
    return SimpleNamespace(_state_ctx=SimpleNamespace(all_states=states))


def test_fsdp_post_backward_pays_the_path_it_takes():
    name = "FSDPParamGroup.post_backward"
    assert charge(name, SimpleNamespace(reduce_grads=True)) == LIBRARY_CALL_NS[name]
    assert charge(name, SimpleNamespace(reduce_grads=False)) == ACCUMULATING_CALL_NS[name]  # sync off
    assert ACCUMULATING_CALL_NS[name] < LIBRARY_CALL_NS[name]


def test_fsdp_final_callback_is_lighter_only_when_no_group_reduced():
    name = "FSDPState._root_post_backward_final_callback"
    assert charge(name, root(False, False)) == ACCUMULATING_CALL_NS[name]
    assert charge(name, root(False, True)) == LIBRARY_CALL_NS[name]
    assert charge(name, root()) == LIBRARY_CALL_NS[name]  # nothing known: the measured path


def test_calls_with_one_path_pay_it_always():
    assert charge("FSDPParamGroup.unshard", SimpleNamespace(reduce_grads=False)) == LIBRARY_CALL_NS["FSDPParamGroup.unshard"]


def test_fsdp_still_names_what_the_path_tests_read():
    """A torch that renamed them would silently charge every call the reducing path."""
    assert "self.reduce_grads" in inspect.getsource(FSDPParamGroup)
    source = inspect.getsource(FSDPState)
    assert "_state_ctx.all_states" in source and "_fsdp_param_groups" in source


def test_every_library_call_the_host_model_prices_is_found_in_this_torch():
    """A call the model prices but the runtime cannot find is never charged: FSDP1's hooks are module functions
    (`fully_sharded_data_parallel._pre_forward`), FSDP2's and DTensor's class methods (`FSDPState._pre_forward`)."""
    missing = [name for name in LIBRARY_CALL_NS if _library_owner(name) is None]
    assert not missing


def test_fsdp1_calls_its_hooks_by_the_names_that_are_charged():
    """FullyShardedDataParallel.forward calls the hooks its module imported, and FSDP1 registers its autograd hooks
    from _runtime_utils' names: a charge on the other module's name would never run."""
    from torch.distributed.fsdp import _runtime_utils
    from torch.distributed.fsdp.fully_sharded_data_parallel import FullyShardedDataParallel
    forward_calls = FullyShardedDataParallel.forward.__code__.co_names
    assert {"_root_pre_forward", "_pre_forward", "_post_forward"} <= set(forward_calls)
    for hook, registrar in (("_pre_backward_hook", "_register_pre_backward_hooks"),
                            ("_post_backward_hook", "_register_post_backward_hook"),
                            ("_post_backward_final_callback", "_register_post_backward_final_callback")):
        assert hook in inspect.getsource(getattr(_runtime_utils, registrar))


class Nested(torch.nn.Module):
    """Five module calls per call: itself, a Sequential and its two layers, and a layer of its own."""

    def __init__(self):
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.head(self.block(x)).sum()


class Breaks(torch.nn.Module):
    """A module whose forward Dynamo compiles as two graphs."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = self.layer(x)
        torch._dynamo.graph_break()
        return self.layer(x).sum()


def charge_as_in_a_rank(monkeypatch, charge: Callable[[], None], dynamo_after_install: bool = False) -> None:
    """Module calls charged as in a rank (runtime/module_calls.py), `Module._call_impl` restored after the test.
    A rank imports Dynamo before the install (runtime/cuda_api.py), and Dynamo keeps torch's own `_call_impl` as the
    one it may trace straight past; imported after the install, it would take the charged one for it."""
    from torch._dynamo.variables import nn_module

    monkeypatch.setattr(torch.nn.Module, "_call_impl", torch.nn.Module._call_impl)
    charge_module_calls(charge)
    if dynamo_after_install:
        monkeypatch.setattr(nn_module, "unpatched_nn_module_call_impl", torch.nn.Module._call_impl)


@pytest.fixture
def module_calls(monkeypatch) -> list[str]:
    charged: list[str] = []
    charge_as_in_a_rank(monkeypatch, lambda: charged.append("module call"))
    return charged


@pytest.fixture
def dynamo(phantora_skipped_by_dynamo):
    yield
    torch._dynamo.reset()


def test_each_module_call_is_charged_once_with_no_global_hook(module_calls):
    Nested()(torch.ones(2, 4))
    assert module_calls == ["module call"] * 5
    assert not torch.nn.modules.module._has_any_global_hook()  # every call takes torch's fast path


def test_a_module_call_is_charged_before_its_forward_pre_hooks(module_calls):
    layer = torch.nn.Linear(4, 4)
    layer.register_forward_pre_hook(lambda module, args: module_calls.append("pre-hook"))
    layer(torch.ones(2, 4))
    assert module_calls == ["module call", "pre-hook"]


@pytest.mark.parametrize("dynamo_after_install", [False, True])
def test_dynamo_inlines_the_charged_call_but_never_starts_a_frame_in_it(dynamo, monkeypatch, dynamo_after_install):
    from torch._dynamo import trace_rules

    charged: list[int] = []
    charge_as_in_a_rank(monkeypatch, lambda: charged.append(1), dynamo_after_install)
    call = torch.nn.Module._call_impl
    assert call.__name__ == "_call_impl"  # what Dynamo's wrapping of a callable to compile looks for
    assert trace_rules.check(call) and not trace_rules.check(call, is_inlined_call=True)
    explained = torch._dynamo.explain(lambda x, net: net(x))(torch.ones(2, 4), Nested())
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert charged == []


def charges_per_call(charged: list[int]) -> dict[str, list[int]]:
    """The charges of two calls of each: an eager module, `torch.compile(module)`, `Module.compile()`, a compiled
    function whose module breaks its graph and which calls a module from code Dynamo skips, `torch.fx`'s tracing."""
    x, skipped = torch.ones(2, 4), torch._dynamo.disable(lambda module, x: module(x))
    compiled, in_place, breaks = torch.compile(Nested(), backend="eager"), Nested(), Breaks()
    in_place.compile(backend="eager")
    function = torch.compile(lambda x: breaks(x) + skipped(Nested(), x), backend="eager")
    calls = {"eager": lambda: Nested()(x), "compiled": lambda: compiled(x), "in place": lambda: in_place(x),
             "function": lambda: function(x), "fx": lambda: torch.fx.symbolic_trace(Nested())}
    seen: dict[str, list[int]] = {name: [] for name in calls}
    for name, call in calls.items():
        for _ in range(2):
            before = len(charged)
            call()
            seen[name].append(len(charged) - before)
    return seen


@pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")
def test_charges_what_a_global_pre_hook_charged(dynamo, monkeypatch):
    """A global forward pre-hook that charged unless compiling charged nothing where Dynamo's frame evaluation was
    on: Dynamo compiled the hook's own frame there (runtime/module_calls.py Note [Module calls on torch's fast
    path]). So of a compiled module only its `OptimizedModule` is charged, and a module compiled in place not."""
    hooked: list[int] = []

    def hook(module, args) -> None:
        if not torch.compiler.is_compiling():
            hooked.append(1)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        expected = charges_per_call(hooked)
    finally:
        handle.remove()
    torch._dynamo.reset()
    charged: list[int] = []
    charge_as_in_a_rank(monkeypatch, lambda: charged.append(1))
    assert charges_per_call(charged) == expected, expected
    assert expected["eager"] == [5, 5] and expected["compiled"] == [1, 1] and expected["in place"] == [0, 0]
    assert expected["fx"] == [1, 1]  # the Sequential, traced through; the Linear layers are leaves


def test_compiled_graphs_are_pytorchs_own(dynamo, monkeypatch):
    """Dynamo traces a module call through the charged `_call_impl` to the graphs it makes without Phantora (a
    global module hook would lift a module's input before its parameters)."""

    def graphs() -> list[str]:
        seen: list[str] = []

        def backend(graph, inputs):
            seen.append(graph.code)
            return graph.forward

        torch.compile(Breaks(), backend=backend)(torch.ones(2, 4))
        torch._dynamo.reset()
        return seen

    plain = graphs()
    charge_as_in_a_rank(monkeypatch, lambda: None)
    assert graphs() == plain and len(plain) == 2


class Encoding:
    def __init__(self, tokens: int):
        self.tokens = tokens

    def __len__(self) -> int:
        return self.tokens


class WordTokenizer:
    """`tokenizers.Tokenizer`'s encoders, one token per word."""

    def encode(self, sequence, pair=None, is_pretokenized=False, add_special_tokens=True):
        words = sequence if is_pretokenized else sequence.split()
        return Encoding(len(words) + (len(pair.split()) if pair else 0))

    def encode_batch(self, input, is_pretokenized=False, add_special_tokens=True):
        return [self.encode(*text) if isinstance(text, tuple) else self.encode(text, is_pretokenized=is_pretokenized)
                for text in input]


def charged_tokenizer() -> tuple[WordTokenizer, list[int]]:
    class Tokenizer(WordTokenizer):
        pass
    paid: list[int] = []
    _charge_encoders(Tokenizer, HostModel(H200_HOST), paid.append)
    return Tokenizer(), paid


def tokenize_ns(chars: int, tokens: int) -> int:
    return H200_HOST.tokenize_char_ns * chars + H200_HOST.tokenize_token_ns * tokens


def test_an_encoder_pays_the_characters_it_reads_and_the_tokens_it_returns():
    tokenizer, paid = charged_tokenizer()
    assert len(tokenizer.encode("two words")) == 2
    tokenizer.encode(sequence="one", pair="and two")  # by keyword: the pair's text counts
    tokenizer.encode("one", "and two")
    assert paid == [tokenize_ns(9, 2), tokenize_ns(10, 3), tokenize_ns(10, 3)]


def test_a_batch_pays_all_its_texts_pairs_and_pretokenized_words():
    tokenizer, paid = charged_tokenizer()
    tokenizer.encode_batch(["a b", ("c", "d e")])
    tokenizer.encode_batch(input=[["pre", "split"]], is_pretokenized=True)
    assert paid == [tokenize_ns(3 + 4, 2 + 3), tokenize_ns(8, 2)]


def test_encoders_are_charged_once_however_often_the_charge_is_installed():
    tokenizer, paid = charged_tokenizer()
    _charge_encoders(type(tokenizer), HostModel(H200_HOST), paid.append)
    tokenizer.encode("one")
    assert paid == [tokenize_ns(3, 1)]


def test_tokenizers_still_names_the_text_parameters_the_charge_reads():
    """A release that renamed them would charge a call by keyword nothing for its text."""
    Tokenizer = pytest.importorskip("tokenizers").Tokenizer
    for name, inputs in ENCODER_INPUTS.items():
        signature = getattr(Tokenizer, name).__text_signature__ if hasattr(Tokenizer, name) else None
        if signature is not None:
            assert signature.startswith("(self, " + ", ".join(inputs)), (name, signature)
