"""Host time of Python that op interception does not see.

Op interception charges the host for every op (models/host.py); a training step also spends host
time in Python that issues few or no ops: `nn.Module.__call__` and the `forward` bodies around the
ops, `optimizer.step()`'s per-parameter bookkeeping, FSDP2's hooks and DTensor's Python entry points, `zero_grad()` (no op at all with
`set_to_none=True`), `clip_grad_norm_`'s grouping of gradients, functional collectives' Python, fetching a batch from a
DataLoader (and the CPU its pin-memory thread then takes from the ops that follow:
`Session.thread_steal_ns`), a tokenizer encoding text (Rust: models/host.py Note [Tokenizing on the host]). Each is
charged, from the host model's constants, where the call starts (a tokenizer's as it returns, its tokens known): through
PyTorch's own global hook where there is one that costs nothing more (optimizer step pre-hooks), through a thin
wrapper otherwise (module calls: `Module._call_impl`, runtime/module_calls.py Note [Module calls on torch's fast
path]). Deterministic: a constant per call (per parameter for `zero_grad`, per character and token for a tokenizer),
never a measured time.

Only the process that installed the simulation charges: a DataLoader worker forked from it runs
the dataset's code on its own CPU, which the main process does not wait for.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable

from phantora.runtime.clock import forked_from_rank
from phantora.runtime.import_hooks import after_import
from phantora.runtime.module_calls import charge_module_calls

if TYPE_CHECKING:
    from phantora.models.host import HostModel
    from phantora.runtime.session import Session


def install_python_costs(session: Session) -> None:
    import torch
    import torch.distributed._functional_collectives as fc
    import torch.nn.utils.clip_grad as clip_grad
    import torch.optim.optimizer as optimizer
    from torch.utils.data import dataloader

    host = session.host

    def charge_as(term: str) -> Callable[[int], None]:
        def charge(ns: int) -> None:
            if not forked_from_rank():
                session.host_work(ns, term)
        return charge

    module_call, optimizer_python = charge_as("module calls"), charge_as("optimizer")
    charge_module_calls(lambda: module_call(host.module_call_ns()))
    optimizer.register_optimizer_step_pre_hook(lambda opt, args, kwargs: optimizer_python(host.optimizer_step_ns()))
    _charge_before(torch.optim.Optimizer, "zero_grad",
                   lambda opt: optimizer_python(host.zero_grad_ns(sum(len(g["params"]) for g in opt.param_groups))))
    _charge_before(torch.nn.Module, "zero_grad",
                   lambda mod: optimizer_python(host.zero_grad_ns(sum(1 for _ in mod.parameters()))))
    _charge_before(clip_grad, "_get_total_norm", lambda *args: optimizer_python(host.grad_norm_ns()))
    def next_batch(it) -> None:
        if not forked_from_rank():
            session.host_work(host.dataloader_next_ns(), "data loader")
            session.thread_steal_ns(host.dataloader_contention_ns())

    _charge_before(dataloader._BaseDataLoaderIter, "__next__", next_batch)
    after_import("tokenizers", lambda module: _charge_encoders(module.Tokenizer, host, charge_as("tokenizer")))
    collective = charge_as("collective calls")
    _charge_outermost(fc, FUNCTIONAL_COLLECTIVES, lambda name: collective(host.functional_collective_ns(name)))
    library = charge_as("torch library calls")
    for name in host.library_calls():
        owner = _library_owner(name)
        if owner is not None:  # a torch without this library (or this version of it) never calls it
            _charge_before(owner, name.rpartition(".")[2], _library_charge(host, name, library))


_encoding = threading.local()

ENCODER_INPUTS = {"encode": ("sequence", "pair"), "encode_batch": ("input",), "encode_batch_fast": ("input",)}
"""`tokenizers.Tokenizer`'s methods that encode text (`encode_batch_fast` where the version has it) -> their text
parameters, in order."""


def _charge_encoders(tokenizer: type, host: HostModel, charge: Callable[[int], None]) -> None:
    """Each call of a Hugging Face tokenizer's encoders pays the characters it reads and the tokens it returns, as it
    returns (models/host.py Note [Tokenizing on the host])."""
    for name in ENCODER_INPUTS:
        original = getattr(tokenizer, name, None)
        if original is None or getattr(original, "__wrapped__", None) is not None:  # absent, or charged already
            continue

        @functools.wraps(original)
        def encode(self, *args, __original=original, __inputs=ENCODER_INPUTS[name], **kwargs):
            if getattr(_encoding, "active", False):  # an encoder called by another pays as part of it
                return __original(self, *args, **kwargs)
            _encoding.active = True
            try:
                encoded = __original(self, *args, **kwargs)
            finally:
                _encoding.active = False
            texts = [args[i] if i < len(args) else kwargs.get(key) for i, key in enumerate(__inputs)]
            charge(host.tokenize_ns(text_chars(texts), encoded_tokens(encoded)))
            return encoded

        setattr(tokenizer, name, encode)


def text_chars(text: Any) -> int:
    """Characters of an encoder's input: a text, a pair of texts, a pre-tokenized list of words, or a batch of those."""
    if isinstance(text, str):
        return len(text)
    if isinstance(text, (list, tuple)):
        return sum(text_chars(part) for part in text)
    return 0


def encoded_tokens(encoded: Any) -> int:
    """Tokens of an encoder's result: an `Encoding` or a list of them."""
    return sum(len(e) for e in encoded) if isinstance(encoded, list) else len(encoded)


def _library_charge(host: HostModel, name: str, charge: Callable[[int], None]) -> Callable[..., None]:
    """Charge a call of library Python `name` its cost, the accumulating path's where it takes that one."""
    reducing, keeps_gradients = host.library_call_ns(name), KEEPS_GRADIENTS.get(name)
    accumulating = host.library_call_ns(name, accumulating=True)

    def charge_call(owner: Any = None) -> None:
        charge(accumulating if keeps_gradients is not None and keeps_gradients(owner) else reducing)
    return charge_call


def _group_keeps_gradients(group: Any) -> bool:
    return not getattr(group, "reduce_grads", True)


def _root_keeps_gradients(state: Any) -> bool:
    """No param group of the root's FSDP states reduced its gradients in this backward."""
    context = getattr(state, "_state_ctx", None)
    groups = [g for s in getattr(context, "all_states", ()) for g in getattr(s, "_fsdp_param_groups", ())]
    return bool(groups) and all(_group_keeps_gradients(g) for g in groups)


KEEPS_GRADIENTS: dict[str, Callable[[Any], bool]] = {
    "FSDPParamGroup.post_backward": _group_keeps_gradients,
    "FSDPState._root_post_backward_final_callback": _root_keeps_gradients,
}
"""Library calls with a lighter path in a backward that keeps its gradients (gradient accumulation with FSDP2's
`set_requires_gradient_sync(False)`), and whether a call (given its first argument) takes it: it then pays
models/host.py ACCUMULATING_CALL_NS instead of the reducing path's LIBRARY_CALL_NS."""


LIBRARY_MODULES = {
    "FSDPState": "torch.distributed.fsdp._fully_shard._fsdp_state",
    "FSDPParamGroup": "torch.distributed.fsdp._fully_shard._fsdp_param_group",
    "DTensor": "torch.distributed.tensor._api",
    "ColwiseParallel": "torch.distributed.tensor.parallel.style",
    "RowwiseParallel": "torch.distributed.tensor.parallel.style",
    # FSDP1: FullyShardedDataParallel.forward calls its hooks by the names its own module imported, and the
    # autograd hooks are registered (as partials, when a forward runs) from _runtime_utils' names
    "fully_sharded_data_parallel": "torch.distributed.fsdp.fully_sharded_data_parallel",
    "_runtime_utils": "torch.distributed.fsdp._runtime_utils",
}
"""Where the host model's library calls live: `Class.method` names a class's method, `module.function` (the
module's last component) a module's function."""


def _library_owner(name: str) -> Any:
    """The class or module whose attribute a library call `name` is, None where this torch lacks it."""
    owner_name, _, attribute = name.rpartition(".")
    try:
        module = importlib.import_module(LIBRARY_MODULES[owner_name])
        owner = module if module.__name__.rpartition(".")[2] == owner_name else getattr(module, owner_name)
    except (ImportError, AttributeError):
        return None
    return owner if hasattr(owner, attribute) else None


FUNCTIONAL_COLLECTIVES = (
    "broadcast", "all_reduce", "all_reduce_coalesced", "all_gather_tensor", "all_gather_tensor_autograd",
    "all_gather_single", "all_gather_single_autograd", "all_gather_into_tensor_coalesced",
    "all_gather_single_coalesced", "reduce_scatter_tensor", "reduce_scatter_tensor_autograd",
    "reduce_scatter_single", "reduce_scatter_single_autograd", "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single_coalesced", "all_to_all_single", "all_to_all_single_autograd", "permute_tensor")
"""`torch.distributed._functional_collectives`' API: each call from Python pays `functional_collective_ns`
(the backward of a collective, called by the autograd engine, does not go through these)."""

_depth = threading.local()


def _charge_outermost(module: Any, names: tuple[str, ...], charge: Callable[[str], None]) -> None:
    """Charge `charge(name)` for each call of `module.name` that is not made from inside another of them
    (one public function calls another: `all_to_all_single_autograd` is `all_to_all_single`)."""
    for name in names:
        original = getattr(module, name, None)
        if original is None:
            continue

        @functools.wraps(original)
        def wrapper(*args, __original=original, __name=name, **kwargs):
            outer = getattr(_depth, "value", 0)
            if not outer:
                charge(__name)
            _depth.value = outer + 1
            try:
                return __original(*args, **kwargs)
            finally:
                _depth.value = outer

        setattr(module, name, wrapper)


def _charge_before(owner: Any, name: str, charge: Callable[..., None]) -> None:
    """Replace `owner.name` by a wrapper that calls `charge(first argument)` (or `charge()`), then the original.
    The wrapper keeps the original's signature (TP's `distribute_module` counts an input_fn's parameters)
    and its kind (a staticmethod stays one)."""
    static = isinstance(inspect.getattr_static(owner, name), staticmethod)
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        charge(*args[:1])
        return original(*args, **kwargs)

    setattr(owner, name, staticmethod(wrapper) if static else wrapper)
