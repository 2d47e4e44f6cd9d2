"""data/ and benchmarks/ follow the rule of data/README.md: every measurement folder says what it is, and no name
carries the round of work that made it."""

import json
import re

from benchmarks.common.env import write_meta
from benchmarks.common.paths import BENCHMARKS, DATA, SUBJECTS

DATED = re.compile(r"call\d|session\d|round\d", re.IGNORECASE)
META_KEYS = {"script", "argv", "commit", "date", "lease", "versions", "machine"}


def leaves():
    """Every folder under data/<gpu>/<subject>/ that has a meta.json, and every one that holds files but none."""
    return sorted(p.parent for p in DATA.glob("*/*/**/meta.json"))


def test_every_gpu_folder_holds_subjects_only():
    for gpu in (p for p in DATA.iterdir() if p.is_dir() and p.name != "simulator"):
        assert {p.name for p in gpu.iterdir() if p.is_dir()} <= set(SUBJECTS), gpu


def test_every_measurement_has_meta_json_and_a_readme():
    found = leaves()
    assert len(found) > 30
    for leaf in found:
        meta = json.loads((leaf / "meta.json").read_text())
        assert META_KEYS <= set(meta), f"{leaf}: {sorted(META_KEYS - set(meta))}"
        if leaf.parent.name != "runs":
            assert (leaf / "README.md").exists(), leaf
    for subject_dir in (p for gpu in DATA.iterdir() if gpu.is_dir() for p in gpu.iterdir() if p.is_dir()):
        with_files = {f.parent for f in subject_dir.rglob("*") if f.is_file()}
        for folder in with_files:
            assert any(folder == leaf or leaf in folder.parents for leaf in found), f"{folder} is in no measurement"


def test_reruns_are_named_by_lease():
    for runs in DATA.rglob("runs"):
        for run in runs.iterdir():
            assert re.fullmatch(r"\d{4}-\d\d-\d\d-\d\d", run.name), run


def test_no_name_carries_a_call_or_a_session():
    for root in (DATA, BENCHMARKS):
        for path in root.rglob("*"):
            assert not DATED.search(path.name), path


def test_write_meta_records_the_schema(tmp_path):
    path = write_meta(tmp_path / "leaf", str(BENCHMARKS / "host" / "measure_calls.py"), ["--x", "1"], "2026-11-22-24")
    meta = json.loads(path.read_text())
    assert META_KEYS <= set(meta)
    assert meta["script"] == "benchmarks/host/measure_calls.py"
    assert (meta["argv"], meta["lease"]) == (["--x", "1"], "2026-11-22-24")
    assert {"torch", "cuda", "nccl"} <= set(meta["versions"])
