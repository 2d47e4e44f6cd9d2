"""Library probes for tracing (runtime/library_probes.py Note [Library probes for tracing])."""

import sys

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from phantora.runtime.import_hooks import after_import
from phantora.runtime.library_probes import is_tracing_fake


class OurMode(FakeTensorMode):
    pass


def test_only_a_libraries_own_fake_tensors_count_as_tracing():
    with OurMode():
        ours = torch.empty(2)
    with FakeTensorMode():
        theirs = torch.empty(2)
    assert not is_tracing_fake(ours, OurMode)
    assert is_tracing_fake(theirs, OurMode)
    assert not is_tracing_fake(torch.empty(2), OurMode)


def test_a_hook_runs_when_its_module_is_imported(tmp_path, monkeypatch):
    (tmp_path / "probed_library.py").write_text("def is_fake_tensor(x):\n    return True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    after_import("probed_library", lambda module: setattr(module, "is_fake_tensor", lambda x: False))
    import probed_library

    try:
        assert probed_library.is_fake_tensor(None) is False
    finally:
        sys.modules.pop("probed_library", None)
