"""The GPU memory model (phantora.models.memory) replays real allocator behaviour step by step: the scenarios
benchmarks/memory/allocator_probe.py recorded on an H200 (data/h200/memory/allocator_probe.json, torch 2.11.0+cu130).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phantora.models.memory import AllocatorConfig, CachingAllocatorModel, SimulatedOutOfMemoryError

MiB = 1024 * 1024

PROBE = Path(__file__).resolve().parents[2] / "data" / "h200" / "memory" / "allocator_probe.json"

H200_NVML_CONTEXT_BYTES = 588 * MiB
"""What NVML reports for the probe process with nothing reserved: the capacity scenario's OOM
message says "this process has 588.00 MiB memory in use" while total - free is 596.81 MiB."""
LAZY_MODULE_LOAD_BYTES = 2 * MiB
"""The first launch of torch.cuda._sleep loads its module and grows the context by 2 MiB
(record_stream scenario: mem_get_info drops by 2 MiB at the first 'sleep' step)."""


# ----------------------------------------------------------------------------- replay of the H200 probe


def _probe() -> dict[str, Any]:
    assert PROBE.exists(), f"{PROBE} is missing: run benchmarks/memory/allocator_probe.py on a GPU"
    return json.loads(PROBE.read_text())


def _layout(segments: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Segments as comparable values: addresses differ between model and device, layouts must not."""
    return sorted(
        (
            s["segment_type"],
            s["stream"],
            s["total_size"],
            tuple((b["size"], b["state"], b["requested_size"]) for b in s["blocks"]),
        )
        for s in segments
    )


def _replay(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """Feed a recorded scenario into a fresh model; return what the model reports after each step."""
    free0, total = scenario["mem_get_info_start"]
    model = CachingAllocatorModel(
        total,
        total - free0,
        AllocatorConfig.parse(scenario["conf"] or ""),
        nvml_context_bytes=H200_NVML_CONTEXT_BYTES,
    )
    streams = scenario["streams"]
    ptrs: dict[str, int] = {}
    loaded_sleep_kernel = False
    out = []
    for step in scenario["steps"]:
        op = step["op"]
        oom = None
        kind = op["op"]
        if kind == "malloc":
            try:
                ptrs[op["name"]] = model.malloc(op["nbytes"], streams[op["stream"]])
            except SimulatedOutOfMemoryError as e:
                oom = str(e)
        elif kind == "free":
            model.free(ptrs.pop(op["name"]))
        elif kind == "record_stream":
            model.record_stream(ptrs[op["name"]], streams[op["stream"]])
        elif kind == "sleep":  # a kernel launch: the runtime would grow the context on first load
            if not loaded_sleep_kernel:
                model.context_bytes += LAZY_MODULE_LOAD_BYTES
                loaded_sleep_kernel = True
        elif kind == "synchronize":
            model.synchronize()
        elif kind == "empty_cache":
            model.empty_cache()
        elif kind == "reset_peak":
            model.reset_peak_stats()
        elif kind == "set_fraction":
            model.set_memory_fraction(op["fraction"])
        else:
            raise AssertionError(f"unknown probe op {kind}")
        out.append(
            {
                "allocated": model.allocated_bytes,
                "reserved": model.reserved_bytes,
                "stats": model.memory_stats(),
                "oom": oom,
                "layout": _layout(model.snapshot()),
                "mem_get_info": list(model.mem_get_info()),
            }
        )
    return out


SCENARIOS = sorted(_probe()["scenarios"]) if PROBE.exists() else []


def test_probe_covers_the_brief() -> None:
    data = _probe()
    assert data["meta"]["device"] == "NVIDIA H200"
    assert {"oom_retry", "capacity", "max_split", "record_stream", "two_streams", "fraction_gc"} <= set(SCENARIOS)
    for name, sc in data["scenarios"].items():
        assert sc["error"] is None, f"{name}: {sc['error']}"
        assert sc["steps"], name


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_allocated_and_reserved_every_step(name: str) -> None:
    scenario = _probe()["scenarios"][name]
    for i, (real, model) in enumerate(zip(scenario["steps"], _replay(scenario), strict=True)):
        assert (model["allocated"], model["reserved"]) == (real["allocated"], real["reserved"]), f"step {i} {real['op']}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_memory_stats_every_step(name: str) -> None:
    scenario = _probe()["scenarios"][name]
    for i, (real, model) in enumerate(zip(scenario["steps"], _replay(scenario), strict=True)):
        assert model["stats"] == real["stats"], f"step {i} {real['op']}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_oom_messages(name: str) -> None:
    scenario = _probe()["scenarios"][name]
    for i, (real, model) in enumerate(zip(scenario["steps"], _replay(scenario), strict=True)):
        assert model["oom"] == real["op"].get("oom"), f"step {i}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_segment_layout_every_step(name: str) -> None:
    scenario = _probe()["scenarios"][name]
    for i, (real, model) in enumerate(zip(scenario["steps"], _replay(scenario), strict=True)):
        assert model["layout"] == _layout(real["segments"]), f"step {i} {real['op']}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_mem_get_info_every_step(name: str) -> None:
    scenario = _probe()["scenarios"][name]
    for i, (real, model) in enumerate(zip(scenario["steps"], _replay(scenario), strict=True)):
        assert model["mem_get_info"] == real["mem_get_info"], f"step {i} {real['op']}"


def test_replay_sees_ooms_and_retries() -> None:
    """The probe must exercise the OOM path, or the replay tests above prove little about it."""
    data = _probe()["scenarios"]
    ooms = [s["op"]["oom"] for sc in data.values() for s in sc["steps"] if "oom" in s["op"]]
    assert len(ooms) >= 5
    assert any("allowed; " in m for m in ooms)
    assert data["oom_retry"]["steps"][-1]["stats"]["num_alloc_retries"] == 3
