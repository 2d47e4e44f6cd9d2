"""`torch.compile` under Phantora is PyTorch's own, with the simulated Inductor as its default backend
(runtime/compile.py Note [torch.compile under Phantora])."""

import collections

import pytest
import torch

from phantora.runtime import compile as phantora_compile
from phantora.runtime.inductor import SimulatedInductor


class _Stats:
    def __init__(self):
        self.warnings = []
        self.compiled = collections.Counter()


class _Session:
    def __init__(self):
        self.stats = _Stats()

    def warn_once(self, key, message):
        self.stats.warnings.append(message)


@pytest.fixture
def session(monkeypatch):
    monkeypatch.setattr(torch, "compile", torch.compile)
    monkeypatch.setattr(phantora_compile, "prepare_dynamo", lambda: None)  # Dynamo's global settings stay
    session = _Session()
    session.backends = []
    make = phantora_compile.simulated_inductor

    def simulated_inductor(*args):
        session.backends.append(make(*args))
        return session.backends[-1]

    monkeypatch.setattr(phantora_compile, "simulated_inductor", simulated_inductor)
    phantora_compile.install_compile(session, recorder=None)
    return session


def test_a_compiled_module_is_an_optimized_module_with_its_original(session):
    layer = torch.nn.Linear(2, 2)
    compiled = torch.compile(layer, fullgraph=True, dynamic=False)
    assert type(compiled).__name__ == "OptimizedModule" and compiled._orig_mod is layer
    assert list(compiled.state_dict()) == ["_orig_mod.weight", "_orig_mod.bias"]
    assert compiled.weight is layer.weight and compiled.in_features == 2  # attributes forwarded
    assert [type(b) for b in session.backends] == [SimulatedInductor]
    assert session.stats.warnings == [] and not session.stats.compiled  # nothing compiled yet


def test_functions_decorators_and_methods_compile_without_warning(session):
    """Libraries compile helpers at import (TorchTitan's flex attention): nothing is compiled until they run."""
    double = torch.compile(lambda x: 2 * x, fullgraph=True)
    decorated = torch.compile(dynamic=False, mode="max-autotune-no-cudagraphs")(lambda x: x + 1)
    layer = torch.nn.Linear(2, 2)
    layer.compile()
    assert callable(double) and callable(decorated) and layer._compiled_call_impl is not None
    assert session.stats.warnings == []


def test_modes_and_options_are_torchs_inductor_settings(session):
    torch.compile(torch.nn.Linear(2, 2), mode="reduce-overhead")
    inductor = session.backends[-1]
    assert inductor.config["triton.cudagraphs"] is True and inductor.mode == "reduce-overhead"
    with pytest.raises(RuntimeError, match="Either mode or options"):
        torch.compile(torch.nn.Linear(2, 2), mode="max-autotune", options={"max_autotune": True})
    with pytest.raises(RuntimeError, match="Unrecognized mode"):
        torch.compile(torch.nn.Linear(2, 2), mode="fastest")


def test_other_backends_are_left_as_they_are(session):
    compiled = torch.compile(torch.nn.Linear(2, 2), backend="eager")
    assert type(compiled).__name__ == "OptimizedModule" and session.backends == []
