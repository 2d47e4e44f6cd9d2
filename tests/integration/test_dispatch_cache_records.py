"""The dispatch cache (runtime/dispatch_cache.py Note [Replaying FakeTensorMode's cache]) changes nothing the
simulation records: programs run with it and without it (PHANTORA_DISPATCH_CACHE=0) give the same trace of
every kernel, the same memory timeline, op log, rank results and summary, and the same program output."""

import json
from pathlib import Path

from conftest import SCRIPTS

MEASURED_HERE = {"simulator_wall_s", "simulator_cpu_s", "simulator_peak_rss_gib", "launcher_peak_rss_gib",
                 "simulator_peak_rss_bytes", "simulator_records", "launcher_cpu_s"}
"""The simulator's own cost on this machine (records: how the rank batched them), not simulated numbers."""


def simulated(value):
    if isinstance(value, dict):
        return {k: simulated(v) for k, v in value.items() if k not in MEASURED_HERE}
    if isinstance(value, list):
        return [simulated(v) for v in value]
    return value


def outputs(out_dir: Path) -> dict[str, object]:
    """Every file a run writes, JSON read back without the simulator's own costs."""
    found = {}
    for path in sorted(out_dir.rglob("*")):
        if path.suffix == ".json":
            found[str(path.relative_to(out_dir))] = simulated(json.loads(path.read_text()))
        elif path.suffix == ".jsonl":  # a JSON object a line (ops, step marks)
            found[str(path.relative_to(out_dir))] = [simulated(json.loads(line))
                                                     for line in path.read_text().splitlines()]
    return found


def tagged(stdout: str, tag: str) -> list[str]:
    return sorted(line for line in stdout.splitlines() if tag in line)


def test_one_rank_program_with_and_without_the_cache(phantora, monkeypatch):
    runs = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("PHANTORA_DISPATCH_CACHE", setting)
        runs[setting] = phantora(str(SCRIPTS / "dispatch_cache_probe.py"))
        assert runs[setting].code == 0, runs[setting].stderr
    cached, uncached = (json.loads(runs[s].stdout.split("CACHE ", 1)[1].splitlines()[0]) for s in ("1", "0"))
    assert cached["entries"] > 50 and uncached["entries"] == 0  # the cache served ops, and could be turned off
    assert cached["seen"] == uncached["seen"]
    with_cache, without = outputs(runs["1"].out_dir), outputs(runs["0"].out_dir)
    assert "trace.json" in with_cache and "rank0/memory.json" in with_cache
    assert with_cache == without


def test_fsdp_ranks_with_and_without_the_cache(torchrun):
    """FSDP2 on two ranks: DTensor's local ops, storages freed and re-allocated, collectives' unwaited results."""
    runs = {setting: torchrun(2, str(SCRIPTS / "parallel_train.py"), "--mode", "fsdp", "--dim", "256",
                              env={"PHANTORA_DISPATCH_CACHE": setting})
            for setting in ("1", "0")}
    for run in runs.values():
        assert run.code == 0, run.stderr
    assert tagged(runs["1"].stdout, "RESULT") == tagged(runs["0"].stdout, "RESULT")
    assert outputs(runs["1"].out_dir) == outputs(runs["0"].out_dir)
