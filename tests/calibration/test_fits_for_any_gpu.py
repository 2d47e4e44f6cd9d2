"""The fits of the NCCL constants, the power model and the GEMM kernel table take any GPU's measurements (--gpu), and
fit_all refits into a copy of what ships, so a fit that writes some fields of a file keeps the others."""

import dataclasses
import json

import pytest

from benchmarks import fit_all
from benchmarks.collectives import error
from benchmarks.collectives import fit as nccl_fit
from benchmarks.common.fitted import update_fitted
from benchmarks.kernels import gemm_kernels
from benchmarks.power import fit as power_fit
from phantora.specs import load_profile


def test_fit_all_works_on_a_copy_of_the_shipped_files_and_reports_only_what_a_fit_wrote(tmp_path):
    before = fit_all.working_copy("h200", tmp_path)
    shipped = json.loads((fit_all.SPECS / "h200" / "power.json").read_text())["constants"]
    assert {"power.json", "nccl.json", "host.json", "kernels.jsonl"} <= before.keys()
    assert fit_all.report("h200", tmp_path, before) == {}
    update_fitted("h200", "power", {"pj_per_byte": shipped["pj_per_byte"] + 1}, {"pj_per_byte": "a test"},
                  specs_root=tmp_path)
    assert list(fit_all.report("h200", tmp_path, before)) == ["power.json"]
    refitted = json.loads((tmp_path / "h200" / "power.json").read_text())["constants"]
    assert refitted == {**shipped, "pj_per_byte": shipped["pj_per_byte"] + 1}


def test_a_gpus_collective_measurements_are_read_world_by_world_and_simulated_on_that_gpu(tmp_path, monkeypatch):
    row = {"op": "all_reduce", "bytes": 1 << 30, "seconds": 0.006}
    for world in (8, 2):
        (tmp_path / f"nccl_{world}.jsonl").write_text(json.dumps({**row, "world": world}) + "\n")
    monkeypatch.setitem(error.REFERENCE, "h100", tmp_path)
    rows = error.load_rows("h100")
    assert [r.world for r in rows] == [2, 8]
    seconds, _ = error.predict_s(rows[0], "h100")
    assert 0.001 < seconds < 0.02


def test_a_gpu_without_collective_measurements_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(error.REFERENCE, "h100", tmp_path)
    with pytest.raises(SystemExit, match="no nccl_<world>.jsonl"):
        error.load_rows("h100")
    assert error.reference_dir("b200") == error.data_dir("b200", "collectives", "nccl_isolated")


def test_the_gemm_kernel_table_is_labelled_with_the_gpu_it_was_measured_on():
    sweep = {"sweep": [8000, 8001], "torch": "2.11.0+cu130", "gemms": [
        {"m": m, "phase": "forward", "inputs": [[[m, 2048], [2048, 1], "torch.bfloat16"],
                                                [[2048, 4096], [4096, 1], "torch.bfloat16"]],
         "kernels": ["nvjet_a"]} for m in (8000, 8001)]}
    table = gemm_kernels.build_table(sweep, "h100")
    assert table["gpu"] == "h100" and "one H100" in table["measured"]
    assert table["families"][0]["runs"] == [[8000, 0]]


def test_one_world_size_holds_the_per_step_latency_which_comes_from_the_lender_only_for_a_first_fit():
    two, four = (error.Row("all_reduce", world, 1 << 30, 0.006) for world in (2, 4))
    assert nccl_fit.held_coordinates([two, two]) == {"nvlink_step_scale"}
    assert nccl_fit.held_coordinates([two, four]) == set()
    lender = load_profile("h200").nccl
    borrowed = dataclasses.replace(lender, source="specs/h200/nccl.json", borrowed_from="h200")
    first = nccl_fit.written_sources("h100", borrowed, {"nvlink_step_scale"})
    assert first["nvlink_step_latency_ns"] == ("benchmarks/collectives/fit.py on data/h200/collectives/nccl, borrowed "
                                              "from h200 (data/h100/collectives/nccl_isolated has one world size)")
    assert first["nvlink_efficiency"] == "benchmarks/collectives/fit.py on data/h100/collectives/nccl_isolated"
    own = dataclasses.replace(lender, borrowed_from=None)
    assert "nvlink_step_latency_ns" not in nccl_fit.written_sources("h100", own, {"nvlink_step_scale"})
    assert set(nccl_fit.written_sources("h100", own, set())) == set(nccl_fit.FITTED)


def test_a_first_power_file_without_a_step_takes_the_lenders_baseline_and_says_so(monkeypatch):
    own = load_profile("h200")
    borrowing = dataclasses.replace(own, power=dataclasses.replace(own.power, borrowed_from="h200"))
    monkeypatch.setattr(power_fit, "load_profile", lambda gpu: borrowing)
    assert power_fit.borrowed_baseline("b200").startswith("benchmarks/power/fit.py on data/h200/power/nvml")
    assert power_fit.borrowed_baseline("b200").endswith(", borrowed from h200 (no --step of this GPU yet)")
    monkeypatch.setattr(power_fit, "load_profile", lambda gpu: own)
    assert power_fit.borrowed_baseline("h200") is None
