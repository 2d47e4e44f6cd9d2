"""One DeviceProfile per GPU (specs/<gpu>/): every GPU resolves, borrowed parts are marked and reported, bad files
fail naming the file, the H200's numbers are the ones the models were fitted with, and no GPU table hides elsewhere."""

from __future__ import annotations

import ast
import io
import json
import shutil
from pathlib import Path

import pytest

import phantora
from phantora.engine.coordinator import Coordinator
from phantora.models.host_contention import HostContention
from phantora.models.interference import GpuSharing
from phantora.models.network import NetworkSimulator, Topology
from phantora.models.network.config import NcclTuning, PerProtocol
from phantora.models.power import PowerCap
from phantora.reports.summary import build_summary, print_summary
from phantora.specs import ProfileError, UnknownGpuError, get_gpu_spec, known_gpus, load_profile
from phantora.specs.cluster import cluster_from_flags
from phantora.specs.profile import read_profile

SPECS = Path(phantora.__file__).parent / "specs"
GPU_NAMES = frozenset({"h100", "h200", "a100", "b200"})


@pytest.mark.parametrize("key", ["h200", "h100", "a100", "b200"])
def test_every_gpu_resolves_to_a_profile(key):
    profile = load_profile(key)
    assert profile.key == key and profile.spec.key == key and profile.spec is get_gpu_spec(key)
    assert load_profile(key.upper()) is profile  # resolved once per process
    assert profile.node.gpus_per_node == 8 and set(profile.node.sources) >= {"nvlink_gbytes_per_s", "nic_gbits_per_s"}
    for name, part in profile.parts().items():
        assert part.source, f"{key}: {name} has no source"
    assert profile.kernels.value.gpu == key


def test_known_gpus_are_the_folders_with_a_profile():
    assert set(known_gpus()) == GPU_NAMES


def test_h100_marks_what_it_borrows_from_the_h200():
    h100 = load_profile("h100")
    assert h100.borrowed() == {"sharing": "h200", "host": "h200", "host_contention": "h200", "python_prices": "h200",
                               "chip_variation": "h200", "nccl.nvlink_step_latency_ns": "h200"}
    assert h100.host.source == "specs/h200/host.json" and h100.host.value == load_profile("h200").host.value
    # its own kernel times, analytic calibration, GEMM kernel table, NCCL constants and power model (data/h100/)
    assert h100.kernels.source == "specs/h100/kernels.jsonl" and len(h100.kernels.value) > 4000
    assert h100.calibration.source == "specs/h100/calibration.json" and h100.calibration.value.reference_gpu == "h100"
    assert h100.gemm_kernels.source == "specs/h100/gemm_kernels.json" and len(h100.gemm_kernels.value)
    assert not h100.absent
    assert h100.power.source == "specs/h100/power.json" and h100.power.value.cap_w == 700.0
    assert h100.nccl.source == "specs/h100/nccl.json"
    # one NCCL field that 2 GPUs cannot give is the H200's, and its source says so
    step = h100.nccl.value.sources["nvlink_step_latency_ns"]
    assert step.endswith("borrowed from h200 (data/h100/collectives/nccl_isolated has one world size)")
    assert h100.nccl.value.nvlink_step_latency_ns == load_profile("h200").nccl.value.nvlink_step_latency_ns
    assert load_profile("h200").borrowed() == {}


def test_a100_and_b200_run_without_a_power_limit():
    for key in ("a100", "b200"):
        profile = load_profile(key)
        assert profile.power.value is None and "power" in profile.absent and "power" not in profile.borrowed()


def test_an_unknown_gpu_names_the_known_ones():
    with pytest.raises(UnknownGpuError, match="unknown GPU 'v100'; known GPUs: a100, b200, h100, h200"):
        load_profile("v100")


def test_the_h200_profile_holds_the_constants_the_models_were_fitted_with():
    h200 = load_profile("h200")
    assert h200.power.value == PowerCap(cap_w=700.0, idle_w=184.0, pj_per_tensor_flop=0.827, pj_per_byte=120.0)
    assert h200.sharing.value == GpuSharing(compute_slowdown=1.38, nccl_slowdown=1.49, kernel_gap_ns=890,
                                            by_op=(("all_reduce", 1.29, 1.54),), nccl_channels=24,
                                            p2p_channels_per_peer=16, sm_count=132)
    nccl = h200.nccl.value
    expected = NcclTuning(
        launch_overhead_ns=31_000,
        ring_base_latency_ns=PerProtocol(ll=6600, ll128=14_000, simple=47_400),
        tree_base_latency_ns=PerProtocol(ll=6800, ll128=14_000, simple=47_400),
        nvlink_step_latency_ns=PerProtocol(ll=660, ll128=2090, simple=3740),
        net_step_latency_ns=PerProtocol(ll=2700, ll128=4000, simple=14_000),
        tree_nvlink_step_latency_ns=PerProtocol(ll=600, ll128=1250, simple=4000),
        tree_net_step_latency_ns=PerProtocol(ll=5000, ll128=8500, simple=14_000),
        protocol_bandwidth_factor=PerProtocol(ll=0.25, ll128=0.92, simple=1.0),
        ll_bandwidth_factor_other=1 / 3, nvlink_efficiency=0.87, net_efficiency=0.92, all_to_all_efficiency=0.86,
        tree_bandwidth_factor=0.9, local_copy_bytes_per_s=700e9, sources=nccl.sources)
    assert nccl == expected
    host = h200.host.value
    assert (host.launch_ns, host.framework_ns, host.module_call_ns) == (6500, 10_800, 22_200)
    assert host.autograd_node_ns == 14_400
    assert (host.optimizer_step_ns, host.dataloader_contention_ns, host.gemm_select_ns) == (182_600, 885_600, 220_000)
    assert (host.gemm_kernel_load_ns, host.subclass_op_ns, host.subclass_backward_op_ns) == (4_300_000, 65_500, 44_800)
    assert (host.async_collective_op_ns, host.collective_ns, host.query_ns) == (176_400, 89_542, 1500)
    assert host.library_call_ns["FSDPParamGroup.post_backward"] == 1_189_200 and len(host.library_call_ns) == 20
    assert host.library_call_ns["fully_sharded_data_parallel._pre_forward"] == 837_700  # FSDP1's
    assert host.accumulating_call_ns == {"FSDPState._root_post_backward_final_callback": 106_500,
                                         "FSDPParamGroup.post_backward": 139_600}
    assert h200.calibration.value.reference_gpu == "h200" and len(h200.kernels.value) > 1000
    assert h200.host_contention.value == HostContention(contended_fraction=0.53, contended_factor=1.47, dwell_s=0.45)
    cluster = cluster_from_flags(gpu="h200")
    assert cluster.nvlink.bandwidth_bytes_per_s == 450e9 and cluster.nic.bandwidth_bytes_per_s == 400e9 / 8
    assert cluster.nccl is nccl


def test_every_fitted_constant_cites_a_fit_on_a_data_path():
    for file in sorted(SPECS.glob("*/*.json")):
        data = json.loads(file.read_text())
        if "constants" not in data:
            continue  # calibration.json, gemm_kernels.json: formats of their own
        assert data["model"] == file.stem and data["gpu"] == file.parent.name
        assert set(data["sources"]) == set(data["constants"]), file
        for name, source in data["sources"].items():
            assert source.startswith("benchmarks/") and " on data/" in source, f"{file}: {name}: {source}"


def _copy_specs(tmp_path: Path) -> Path:
    root = tmp_path / "specs"
    for key in ("h200", "h100", "a100"):
        shutil.copytree(SPECS / key, root / key)
    return root


def test_a_copy_of_the_shipped_files_reads_as_the_same_profile(tmp_path):
    root = _copy_specs(tmp_path)
    assert read_profile("h100", root).host.value == load_profile("h100").host.value


def test_a_malformed_fitted_file_names_the_file(tmp_path):
    root = _copy_specs(tmp_path)
    (root / "h200" / "host.json").write_text('{"model": "host", "constants": {')
    with pytest.raises(ProfileError, match=r"specs/h200/host\.json: not valid JSON"):
        read_profile("h200", root)
    with pytest.raises(ProfileError, match=r"specs/h200/host\.json"):  # the borrower fails on the lender's file
        read_profile("h100", root)


def test_a_fitted_file_with_an_unknown_or_missing_field_names_the_file(tmp_path):
    root = _copy_specs(tmp_path)
    power = json.loads((root / "h200" / "power.json").read_text())
    power["constants"]["idle_watts"] = power["constants"].pop("idle_w")
    power["sources"]["idle_watts"] = power["sources"].pop("idle_w")
    (root / "h200" / "power.json").write_text(json.dumps(power))
    with pytest.raises(ProfileError, match=r"specs/h200/power\.json: unknown field\(s\) \['idle_watts'\]"):
        read_profile("h200", root)
    del power["constants"]["idle_watts"], power["sources"]["idle_watts"]
    (root / "h200" / "power.json").write_text(json.dumps(power))
    with pytest.raises(ProfileError, match=r"specs/h200/power\.json: .*idle_w"):
        read_profile("h200", root)


def test_a_part_neither_own_nor_borrowed_nor_absent_is_an_error(tmp_path):
    root = _copy_specs(tmp_path)
    toml = (root / "h100" / "profile.toml").read_text().replace('host = "h200"\n', "", 1)
    (root / "h100" / "profile.toml").write_text(toml)
    with pytest.raises(ProfileError, match=r"specs/h100: no host\.json, and profile\.toml neither borrows"):
        read_profile("h100", root)


def test_a_gpu_with_its_own_file_uses_it_and_borrows_nothing_for_that_part(tmp_path):
    root = _copy_specs(tmp_path)
    shutil.copy(root / "h200" / "kernels.jsonl", root / "a100" / "kernels.jsonl")
    a100 = read_profile("a100", root)
    assert a100.kernels.source == "specs/a100/kernels.jsonl" and a100.kernels.borrowed_from is None
    assert a100.kernels.value.gpu == "a100" and len(a100.kernels.value) == len(load_profile("h200").kernels.value)


def test_the_summary_of_an_h100_run_lists_the_borrowed_parts(tmp_path):
    h100 = load_profile("h100")
    cluster = cluster_from_flags(gpu="h100")
    coordinator = Coordinator(1, NetworkSimulator(Topology(cluster)))
    summary = build_summary(coordinator=coordinator, gpu=h100.spec, cluster=cluster, world_size=1, out_dir=tmp_path,
                            exit_code=0, complete=True, wall_s=1.0, processes=[], launcher_peak_rss_bytes=1 << 20,
                            borrowed=h100.borrowed())
    assert summary["borrowed"] == {"chip_variation": "h200", "host": "h200", "host_contention": "h200",
                                   "nccl.nvlink_step_latency_ns": "h200", "python_prices": "h200", "sharing": "h200"}
    text = io.StringIO()
    print_summary(summary, file=text)
    lent = "chip variation, host, host contention, NCCL tuning (nvlink_step_latency_ns), library Python prices, sharing"
    assert f"borrowed from h200  {lent}" in text.getvalue()
    own = build_summary(coordinator=coordinator, gpu=load_profile("h200").spec, cluster=cluster, world_size=1,
                        out_dir=tmp_path, exit_code=0, complete=True, wall_s=1.0, processes=[],
                        launcher_peak_rss_bytes=1 << 20, borrowed=load_profile("h200").borrowed())
    text = io.StringIO()
    print_summary(own, file=text)
    assert own["borrowed"] == {} and "borrowed" not in text.getvalue()


def gpu_keyed_tables(source: str) -> list[int]:
    """Lines of `source` that build a dict keyed by a GPU name ({"h200": ...} or dict(h200=...))."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.lower() in GPU_NAMES
                for k in node.keys):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"
              and any(kw.arg in GPU_NAMES for kw in node.keywords)):
            lines.append(node.lineno)
    return lines


def test_the_table_check_finds_a_gpu_keyed_table():
    assert gpu_keyed_tables('CAPS = {"h200": 1, "h100": 1}\nOTHER = {"none": 0}\nX = dict(a100=2)\n') == [1, 3]


def test_no_module_outside_specs_keeps_a_table_keyed_by_gpu_names():
    src = Path(phantora.__file__).parent
    found = {str(path.relative_to(src)): lines for path in sorted(src.rglob("*.py"))
             if path.parent != src / "specs" and (lines := gpu_keyed_tables(path.read_text()))}
    assert found == {}, f"GPU-keyed tables belong in phantora.specs (specs/<gpu>/): {found}"
