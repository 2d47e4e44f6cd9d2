import pytest

from phantora.runtime.compile import skip_phantora_in_dynamo


@pytest.fixture
def phantora_skipped_by_dynamo(monkeypatch):
    """Dynamo's skip list as in a rank (runtime/compile.py `skip_phantora_in_dynamo`), restored after the test."""
    from torch._dynamo import trace_rules

    monkeypatch.setattr(trace_rules, "SKIP_DIRS", list(trace_rules.SKIP_DIRS))
    monkeypatch.setattr(trace_rules, "BUILTIN_INLINE_WHEN_CALLED", set(trace_rules.BUILTIN_INLINE_WHEN_CALLED))
    skip_phantora_in_dynamo()
    yield
    monkeypatch.undo()
    trace_rules._recompile_re()
