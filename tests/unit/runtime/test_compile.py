"""`torch.compile` runs eagerly under Phantora and says so when something compiled is used
(runtime/compile.py)."""

import torch

from phantora.runtime.compile import install_compile_fallback


class _Session:
    def __init__(self):
        self.warnings = []

    def warn_once(self, key, message):
        if key not in self.warnings:
            self.warnings.append(key)


def test_a_function_compiled_but_never_called_gives_no_warning(monkeypatch):
    """TorchTitan compiles its flex-attention helpers at import; a model that never calls them is eager anyway."""
    monkeypatch.setattr(torch, "compile", torch.compile)
    monkeypatch.setattr(torch.nn.Module, "compile", torch.nn.Module.compile)
    session = _Session()
    install_compile_fallback(session)
    double = torch.compile(lambda x: 2 * x, fullgraph=True)
    decorated = torch.compile(dynamic=False)(lambda x: x + 1)
    assert session.warnings == []
    assert double(3) == 6 and decorated(1) == 2 and session.warnings == ["torch.compile"]


def test_a_compiled_module_is_the_module_and_warns_at_once(monkeypatch):
    monkeypatch.setattr(torch, "compile", torch.compile)
    monkeypatch.setattr(torch.nn.Module, "compile", torch.nn.Module.compile)
    session = _Session()
    install_compile_fallback(session)
    layer = torch.nn.Linear(2, 2)
    assert torch.compile(layer) is layer and session.warnings == ["torch.compile"]
    other = _Session()
    install_compile_fallback(other)
    assert layer.compile() is None and other.warnings == ["torch.compile"]
