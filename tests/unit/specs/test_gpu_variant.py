"""GPU variants in the cluster file (models/gpu.py GpuVariant, specs.apply_variant): each model uses the variant's
numbers where they physically apply, and the summary says what was derived."""

from __future__ import annotations

import pytest

from phantora.cli.main import build_parser, config_from_args
from phantora.models.compute import ComputeModel, DbEntry
from phantora.models.gpu import GpuVariant
from phantora.models.memory import AllocatorConfig, CachingAllocatorModel, SimulatedOutOfMemoryError
from phantora.models.ops import OpCall, TensorMeta
from phantora.models.power import GpuPower
from phantora.reports.summary import _variant, _variant_rows
from phantora.runtime.cuda_api import device_properties
from phantora.specs import apply_variant, load_profile, profile_for
from phantora.specs.cluster import cluster_from_toml_dict

GiB = 1 << 30
GRAND_TETON = {"name": "NVIDIA H100", "memory_gbytes": 96, "memory_type": "HBM2e",
               "memory_bandwidth_gbytes_per_s": 2400, "power_limit_w": 500}
"""The H100 SXM of Meta's Grand Teton (TorchTitan's published benchmarks): 96 GB HBM2e at 2.4 TB/s, 500 W."""


def variant_profile(**fields):
    return apply_variant(load_profile("h100"), GpuVariant(**fields))


def t(shape, dtype="bfloat16"):
    stride, acc = [], 1
    for d in reversed(shape):
        stride.insert(0, acc)
        acc *= d
    return TensorMeta(tuple(shape), dtype, tuple(stride), "cuda")


def add(n):
    return OpCall("aten.add.Tensor", (t((n,)), t((n,))), (), (t((n,)),))


def mm(n):
    return OpCall("aten.mm.default", (t((n, n)), t((n, n))), (), (t((n, n)),))


def compute(profile, measured: dict[OpCall, int]):
    db = profile.kernels.value.__class__(profile.key)
    for op, ns in measured.items():
        db.add(op, DbEntry(ns, 1, 3, "micro_warm"))
    return ComputeModel(profile.spec, db, profile.calibration.value)


def test_the_cluster_file_describes_the_grand_teton_h100():
    cluster = cluster_from_toml_dict({"gpu": "h100", "variant": GRAND_TETON})
    profile = profile_for("h100", cluster.gpu_variant.given())
    assert profile.spec.memory_bandwidth_bytes_per_s == 2.4e12
    assert profile.power.value.cap_w == 500
    assert profile.spec.total_memory_bytes == round(load_profile("h100").spec.total_memory_bytes * 96 / 80)
    props = device_properties(profile.spec, 0)
    assert props.name == "NVIDIA H100" and props.total_memory == profile.spec.total_memory_bytes


def test_96_gb_fits_what_80_gb_cannot():
    def fits(spec) -> bool:
        allocator = CachingAllocatorModel(spec.total_memory_bytes, spec.cuda_context_bytes, AllocatorConfig())
        try:
            allocator.malloc(86 * GiB)
        except SimulatedOutOfMemoryError:
            return False
        return True

    assert not fits(load_profile("h100").spec)
    assert fits(variant_profile(memory_gbytes=96).spec)


def test_a_higher_power_limit_shortens_power_capped_gemms():
    def gemm_seconds(profile) -> float:
        gpu, t_ns = GpuPower(profile.power.value), 0
        while t_ns < 3e9:  # 8192^3 bf16 GEMMs back to back, 1.4 ms each at full clock
            t_ns += gpu.place(t_ns, "gemm", 2 * 8192**3, 3 * 8192**2 * 2, 1_400_000)
        return gpu.clocked_ns + gpu.slowed_ns

    assert gemm_seconds(variant_profile(power_limit_w=1000)) < gemm_seconds(variant_profile(power_limit_w=500))


def test_measured_memory_bound_times_scale_with_hbm_bandwidth_and_gemms_with_the_clock():
    base = load_profile("h100")
    op_add, op_mm = add(1 << 28), mm(8192)
    measured = {op_add: 500_000, op_mm: 1_500_000}
    slow_hbm = compute(variant_profile(memory_bandwidth_gbytes_per_s=3350 / 2), measured)
    ref = compute(base, measured)
    assert slow_hbm.estimate(op_add).duration_ns > 1.9 * (ref.estimate(op_add).duration_ns - 2_000)
    assert slow_hbm.estimate(op_mm).duration_ns == ref.estimate(op_mm).duration_ns  # compute-bound: the clock's
    slow_clock = compute(variant_profile(boost_clock_mhz=990), measured)
    assert slow_clock.estimate(op_mm).duration_ns > 1.9 * (ref.estimate(op_mm).duration_ns - 2_000)
    assert slow_clock.estimate(op_add).duration_ns == ref.estimate(op_add).duration_ns


def test_a_variant_with_the_base_numbers_keeps_the_measured_times_bit_for_bit():
    measured = {add(1 << 20): 12_345, mm(1024): 67_891}
    same = compute(variant_profile(memory_bandwidth_gbytes_per_s=3350), measured)
    ref = compute(load_profile("h100"), measured)
    assert [same.estimate(op) for op in measured] == [ref.estimate(op) for op in measured]


def test_the_summary_names_the_base_and_what_was_derived():
    spec = variant_profile(**GRAND_TETON).spec
    report = _variant(spec)
    assert report["of"] == "h100"
    assert {"total_memory_bytes", "kernel times", "power"} <= set(report["derived"])
    assert _variant(load_profile("h100").spec) is None


def test_the_cli_hands_the_variant_to_ranks_launcher_and_summary(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text('gpu = "h100"\n[variant]\nmemory_gbytes = 96\nmemory_type = "HBM2e"\n'
                       'memory_bandwidth_gbytes_per_s = 2400\npower_limit_w = 500\n')
    script = tmp_path / "train.py"
    script.write_text("")
    args = build_parser().parse_args(["run", "--cluster", str(cluster), "--", "python", str(script)])
    config, _ = config_from_args(args)
    assert config.profile.power.value.cap_w == 500 and config.profile.spec.base.key == "h100"
    assert profile_for(config.rank_config.gpu, config.rank_config.gpu_variant).spec == config.profile.spec


@pytest.mark.parametrize(("table", "fragment"), [
    ({"memory_gb": 96}, "memory_gb"),
    ({"power_limit_w": "500"}, "power_limit_w"),
    ({"power_limit_w": -5}, "power_limit_w"),
    ({"power_limit_w": 100}, "power_limit_w"),  # below the power model's idle power
    ({"memory_gbytes": 96, "total_memory_bytes": 10**11}, "memory_gbytes"),
    ({"boost_clock_mhz": True}, "boost_clock_mhz"),
    ({"memory_bandwidth_gbytes_per_s": 0}, "memory_bandwidth_gbytes_per_s"),
])
def test_bad_variant_keys_are_one_line_errors_naming_the_key(table, fragment):
    with pytest.raises(ValueError) as error:
        cluster_from_toml_dict({"gpu": "h100", "variant": table})
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_a_clock_on_a_gpu_without_a_known_clock_is_refused():
    with pytest.raises(ValueError, match="boost_clock_mhz"):
        cluster_from_toml_dict({"gpu": "b200", "variant": {"boost_clock_mhz": 1800}})
    with pytest.raises(ValueError, match="power_limit_w"):  # no power model to put the limit on
        cluster_from_toml_dict({"gpu": "a100", "variant": {"power_limit_w": 300}})


def test_variant_rows_in_the_summary_table():
    spec = variant_profile(**GRAND_TETON).spec
    rows = dict(_variant_rows(_variant(spec)))
    assert rows["variant of h100"].startswith("96 GB HBM2e, 2400 GB/s")
