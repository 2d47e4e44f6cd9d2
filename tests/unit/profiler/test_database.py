"""Databases for a simulation (profiler/database.py): which entry wins, and naming the local GPU."""

import pytest
from profiled_ops import MM

from phantora.models.compute import DbEntry, KernelDatabase
from phantora.profiler.database import check_gpu_name, combined_database, gpu_key_for_device
from phantora.specs import load_profile


def test_combined_database_precedence(tmp_path):
    first, second = KernelDatabase("h200"), KernelDatabase("h200")
    first.add(MM, DbEntry(100, 1, 5, "micro_cold", MM.name))
    second.add(MM, DbEntry(200, 1, 5, "micro_cold", MM.name))
    step = KernelDatabase("h200")
    step.add(MM, DbEntry(300, 1, 3, "llama_step", MM.name))
    paths = []
    for name, db in (("a", first), ("b", second), ("step", step)):
        db.save(tmp_path / f"{name}.jsonl")
        paths.append(tmp_path / f"{name}.jsonl")
    assert combined_database("h200", paths[:2], packaged=False).lookup(MM)[0].kernel_ns == 200  # last given wins ties
    assert combined_database("h200", paths, packaged=False).lookup(MM)[0].kernel_ns == 300  # in-step beats micro
    packaged = load_profile("h200").kernels.value
    combined = combined_database("h200", paths[:1])
    assert len(combined) == len(packaged) + 1 and combined is not packaged
    KernelDatabase("h100").save(tmp_path / "h100.jsonl")
    with pytest.raises(ValueError, match="is for h100"):
        combined_database("h200", [tmp_path / "h100.jsonl"])


def test_gpu_names():
    assert gpu_key_for_device("NVIDIA H200") == "h200"
    assert gpu_key_for_device("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_key_for_device("NVIDIA A100-SXM4-80GB") == "a100"
    assert gpu_key_for_device("NVIDIA GeForce RTX 4090") is None
    assert check_gpu_name("L40S") == "l40s"
    with pytest.raises(ValueError):
        check_gpu_name("a/b")
