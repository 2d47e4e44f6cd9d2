"""GPU spec table: known GPUs load with sourced numbers; unknown names fail clearly."""

import dataclasses

import pytest

from phantora.models.gpu import GpuSpec
from phantora.specs import UnknownGpuError, get_gpu_spec, load_gpu_specs


def test_required_gpus_present():
    assert {"h100", "h200", "a100", "b200"} <= set(load_gpu_specs())


def test_h200_matches_measurement():
    h200 = get_gpu_spec("h200")
    assert h200.name == "NVIDIA H200"
    assert h200.total_memory_bytes == 150109880320  # get_device_properties().total_memory on the real card
    assert h200.sm_count == 132
    assert h200.compute_capability == (9, 0)
    assert h200.l2_cache_bytes == 60 * 2**20
    assert 0.5e9 < h200.cuda_context_bytes < 1e9


def test_lookup_is_case_insensitive():
    assert get_gpu_spec("H100") is get_gpu_spec("h100")


def test_unknown_gpu_raises_with_known_names():
    with pytest.raises(UnknownGpuError, match="known GPUs: a100, b200, h100, h200"):
        get_gpu_spec("v100x")
    assert issubclass(UnknownGpuError, ValueError)


@pytest.mark.parametrize("key", sorted(load_gpu_specs()))
def test_every_number_cites_a_source(key):
    spec = get_gpu_spec(key)
    for f in dataclasses.fields(GpuSpec):
        if f.name in ("key", "sources", "base", "derived") or getattr(spec, f.name) is None:
            continue  # not numbers of the GPU, or a number no source gives (b200's clock)
        assert spec.sources.get(f.name), f"{key}.{f.name} has no source"
    assert spec.peak_flops["bf16"] > spec.peak_flops["fp32"] > 0
    assert spec.total_memory_bytes > spec.cuda_context_bytes


def test_relative_specs_make_sense():
    a100, h100, h200, b200 = (get_gpu_spec(k) for k in ("a100", "h100", "h200", "b200"))
    assert h200.peak_flops["bf16"] == h100.peak_flops["bf16"]  # same chip, more memory
    assert h200.memory_bandwidth_bytes_per_s > h100.memory_bandwidth_bytes_per_s > a100.memory_bandwidth_bytes_per_s
    assert b200.peak_flops["bf16"] > h100.peak_flops["bf16"] > a100.peak_flops["bf16"]


def test_spec_validation_rejects_nonsense():
    h200 = get_gpu_spec("h200")
    with pytest.raises(ValueError):
        dataclasses.replace(h200, cuda_context_bytes=h200.total_memory_bytes)
