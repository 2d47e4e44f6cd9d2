"""benchmarks/common/fitted.py: a fit replaces only the constants it fits, with their sources, in a stable file."""

import json

import pytest

from benchmarks.common.fitted import fitted_path, read_fitted, update_fitted


def test_a_first_fit_creates_the_file_in_the_agreed_shape(tmp_path):
    path = update_fitted("h200", "host", {"framework_ns": 10_800}, {"framework_ns": "benchmarks/host/fit_context.py on "
                                                                                    "data/h200/host/launch_bound"},
                         specs_root=tmp_path)
    assert path == tmp_path / "h200" / "host.json"
    assert json.loads(path.read_text()) == {
        "model": "host", "gpu": "h200", "constants": {"framework_ns": 10_800},
        "sources": {"framework_ns": "benchmarks/host/fit_context.py on data/h200/host/launch_bound"}}


def test_a_fit_replaces_its_fields_and_keeps_the_others(tmp_path):
    update_fitted("h200", "host", {"framework_ns": 1, "module_call_ns": 2}, {"framework_ns": "a", "module_call_ns": "a"},
                  specs_root=tmp_path)
    update_fitted("h200", "host", {"module_call_ns": 3, "library_call_ns": {"FSDPState._pre_forward": 4}},
                  {"module_call_ns": "b", "library_call_ns": "b"}, specs_root=tmp_path)
    content = read_fitted("h200", "host", tmp_path)
    assert content["constants"] == {"framework_ns": 1, "module_call_ns": 3, "library_call_ns": {"FSDPState._pre_forward": 4}}
    assert content["sources"] == {"framework_ns": "a", "module_call_ns": "b", "library_call_ns": "b"}


def test_the_file_is_sorted_with_indent_one_so_an_unchanged_refit_leaves_it_byte_for_byte(tmp_path):
    path = update_fitted("h200", "nccl", {"nvlink_efficiency": 0.87, "launch_overhead_ns": 31_000},
                         {"nvlink_efficiency": "s", "launch_overhead_ns": "s"}, specs_root=tmp_path)
    text = path.read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
    update_fitted("h200", "nccl", {"nvlink_efficiency": 0.87}, {"nvlink_efficiency": "s"}, specs_root=tmp_path)
    assert path.read_text() == text


def test_every_constant_needs_a_source_and_every_source_a_constant(tmp_path):
    with pytest.raises(ValueError, match="unmatched: idle_w"):
        update_fitted("h200", "power", {"idle_w": 184.0}, {}, specs_root=tmp_path)
    with pytest.raises(ValueError, match="unmatched: pj_per_byte"):
        update_fitted("h200", "power", {}, {"pj_per_byte": "s"}, specs_root=tmp_path)
    assert not fitted_path("h200", "power", tmp_path).exists()


def test_only_the_agreed_models_and_a_file_of_another_model_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown model"):
        update_fitted("h200", "kernels", {"x": 1}, {"x": "s"}, specs_root=tmp_path)
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "power.json").write_text(json.dumps({"model": "host", "gpu": "h200", "constants": {},
                                                              "sources": {}}))
    with pytest.raises(ValueError, match="holds model 'host'"):
        update_fitted("h200", "power", {"idle_w": 1.0}, {"idle_w": "s"}, specs_root=tmp_path)
