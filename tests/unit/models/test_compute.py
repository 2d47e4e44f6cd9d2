"""Compute cost model against hand-derived answers, and the shipped H200 database (against the measurements:
tests/calibration/test_compute_data.py)."""

import json
import math

import pytest

from phantora.models.compute import Calibration, ComputeModel, DbEntry, KernelDatabase, default_bytes, mta_launches
from phantora.models.opcall import decode_op, loose_signature, signature
from phantora.models.ops import OpCall, TensorMeta
from phantora.specs import get_gpu_spec, load_profile

H200 = get_gpu_spec("h200")
H100 = get_gpu_spec("h100")

CAL = {
    "reference_gpu": "h200",
    "kernel_gap_ns": 1000.0,
    "gemm": {"modes": {"bf16": {"eff": 0.8, "eff_unaligned": 0.2}, "fp32": {"eff": 0.75, "eff_unaligned": 0.5}},
             "tiles": {"tensor": {"sides": [128], "free": [256], "max_area": 32768, "shape_c": 0.0},
                       "simt": {"sides": [128], "free": [256], "max_area": 32768, "shape_c": 0.0}},
             "split_k_min": 256, "max_split": 16, "bw_eff": 0.7, "t0_ns": 2000.0, "two_kernel_mn": 10**18},
    "attention": {"reference_peak_flops": 989.4e12, "reference_bandwidth_bytes_per_s": 4.8e12,
                  "flash_fwd": {"t0_ns": 3000.0, "row_ns": 0.0, "eff": 0.4, "kernels": 1},
                  "flash_bwd": {"t0_ns": 3000.0, "row_ns": 0.0, "eff": 0.3, "kernels": 1}},
    "memory": {"generic": {"t0_ns": 1500.0, "bw_eff": 0.5}, "elementwise": {"t0_ns": 1000.0, "bw_eff": 0.9},
               "h2d": {"t0_ns": 5000.0, "bytes_per_s": 50e9}, "d2h": {"t0_ns": 5000.0, "bytes_per_s": 50e9}},
    "foreach": {"default": {"launch_ns": 2000.0, "bw_eff": 0.8}},
}


def model(gpu=H200, db=None, **overrides):
    cal = json.loads(json.dumps(CAL))
    cal.update(overrides)
    return ComputeModel(gpu, db or KernelDatabase(gpu.key), Calibration.from_dict(cal))


def t(shape, dtype="bfloat16", stride=None, device="cuda"):
    if stride is None:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
    return TensorMeta(tuple(shape), dtype, tuple(stride), device)


def mm(m, n, k, dtype="bfloat16"):
    return OpCall("aten.mm.default", (t((m, k), dtype), t((k, n), dtype)), (), (t((m, n), dtype),))


def add(n, dtype="float32"):
    return OpCall("aten.add.Tensor", (t((n,), dtype), t((n,), dtype)), (), (t((n,), dtype),))


def test_large_square_bf16_gemm_is_flops_over_peak_times_efficiency():
    n = 8192
    est = model().estimate(mm(n, n, n))
    tiles = (n // 128) * (n // 256)  # 2048 tiles of 128x256 (or 256x128)
    util = tiles / (math.ceil(tiles / 132) * 132)  # 16 waves over 132 SMs
    expected = 2000 + 2 * n**3 / (989.4e12 * 0.8 * util) * 1e9 + 1000  # t0 + compute + one kernel gap
    assert est.duration_ns == round(expected)
    assert est.flops == 2 * n**3
    assert est.kernel_class == "gemm" and est.source == "analytic"


def test_fp32_gemm_uses_cuda_core_peak_not_tf32():
    n = 4096
    bf16 = model().estimate(mm(n, n, n)).duration_ns
    fp32 = model().estimate(mm(n, n, n, "float32")).duration_ns
    # 989.4/66.9 peak ratio, 0.8/0.75 efficiency ratio
    assert fp32 / bf16 == pytest.approx((989.4 / 66.9) * (0.8 / 0.75), rel=0.02)


def test_misaligned_gemm_is_slower():
    assert model().estimate(mm(4095, 4097, 4099)).duration_ns > 3 * model().estimate(mm(4096, 4096, 4096)).duration_ns


def test_skinny_gemm_is_memory_bound():
    est = model().estimate(mm(1, 14336, 4096))
    weight_bytes = 14336 * 4096 * 2
    assert est.duration_ns >= weight_bytes / (4.8e12 * 0.7) * 1e9


TILES = {"tensor": {"sides": [64, 128, 192, 256], "free": [64, 128, 192, 256], "max_area": 32768, "shape_c": 16.0},
         "simt": {"sides": [64, 128, 192, 256], "free": [64, 128, 192, 256], "max_area": 32768, "shape_c": 16.0}}


def test_gemm_of_one_partly_filled_wave_takes_the_tile_that_fills_the_gpu():
    """Note [GEMM tile choice]: 2048 x 1152 makes 144 tiles of 128x128, a full wave of 132 and a second of 12 on an
    H200; 96 tiles of 128x192 do it in one wave, each tile 1.5x the work."""
    m = model(gemm=dict(CAL["gemm"], tiles=TILES))
    op = mm(2048, 1152, 2048)
    tiling = m.gemm_tiling(op)
    assert (tiling.tm, tiling.tn, tiling.split, tiling.waves) == (128, 192, 1, 1)
    shape_eff = 1 / (1 + 16.0 * (1 / 128 + 1 / 192))
    compute = 2 * 128 * 192 * 2048 / (989.4e12 / 132 * 0.8 * shape_eff) * 1e9
    assert m.estimate(op).duration_ns == round(2000 + compute + 1000)
    # one tile shape and no split (the model before the choice): two waves of 128x128, 1.38x the time
    single = {f: dict(r, sides=[128], free=[128]) for f, r in TILES.items()}
    one_tile = model(gemm=dict(CAL["gemm"], tiles=single, max_split=1))
    assert one_tile.gemm_tiling(op).waves == 2
    assert one_tile.estimate(op).duration_ns - 3000 == pytest.approx(1.38 * (m.estimate(op).duration_ns - 3000), rel=0.01)


def test_gemm_of_few_tiles_splits_k_to_fill_the_gpu():
    """Few tiles and a deep K: split K until the GPU is full, and pay for reducing the partial sums."""
    m = model(gemm=dict(CAL["gemm"], tiles=TILES))
    op = mm(256, 1024, 16384)
    tiling = m.gemm_tiling(op)
    tiles = -(-256 // tiling.tm) * -(-1024 // tiling.tn)
    assert tiling.split > 1 and tiling.waves == 1 and tiles * tiling.split > 132 // 2
    unsplit = model(gemm=dict(CAL["gemm"], tiles=TILES, max_split=1))
    assert unsplit.gemm_tiling(op).split == 1
    assert m.estimate(op).duration_ns < 0.7 * unsplit.estimate(op).duration_ns
    partials = 2 * tiling.split * 256 * 1024 * 4 / (4.8e12 * 0.7) * 1e9
    assert m.estimate(op).duration_ns > partials + 2000 + 2 * 1000  # the reduction and its kernel are paid


def test_a_grouped_weight_gradient_runs_pytorchs_tile_without_splitting_k():
    """Note [Grouped GEMMs]: 4 experts' 256 x 256 weight gradients over 98,304 tokens are 8 tiles of 128 x 256 on
    132 SMs, each looping over its expert's 24,576 tokens; a plain GEMM of that shape splits K instead."""
    tokens, groups = 98304, 4
    op = OpCall("aten._grouped_mm.default", (t((256, tokens), stride=(1, 256)), t((tokens, 256)), t((groups,), "int32")),
                (), (t((groups, 256, 256)),))
    m = model(gemm=dict(CAL["gemm"], tiles=TILES))
    tiling = m.gemm_tiling(op)
    assert (tiling.tm, tiling.tn, tiling.split, tiling.waves) == (128, 256, 1, 1)
    shape_eff = 1 / (1 + 16.0 * (1 / 128 + 1 / 256))
    compute = 2 * 128 * 256 * (tokens // groups) / (989.4e12 / 132 * 0.8 * shape_eff) * 1e9
    assert m.estimate(op).duration_ns == round(2000 + compute + 1000)
    plain = OpCall("aten.bmm.default", (t((groups, 256, tokens // groups)), t((groups, tokens // groups, 256))), (),
                   (t((groups, 256, 256)),))
    assert m.gemm_tiling(plain).split > 1 and m.estimate(plain).duration_ns < m.estimate(op).duration_ns / 4


def test_gemm_tile_choice_follows_the_gpu_sm_count():
    """The same GEMM on 132 SMs (H200) and 108 (A100): 128 tiles of 256x128 fill one wave on the first but not
    the second, which takes 128x128 tiles or splits K instead."""
    a100 = get_gpu_spec("a100")
    h200 = model(gemm=dict(CAL["gemm"], tiles=TILES)).gemm_tiling(mm(2048, 2048, 2048))
    other = model(a100, gemm=dict(CAL["gemm"], tiles=TILES)).gemm_tiling(mm(2048, 2048, 2048))
    assert (h200.waves, other.waves) != (1, 1) or (h200.tm, h200.tn, h200.split) != (other.tm, other.tn, other.split)


def test_elementwise_is_bytes_over_bandwidth():
    n = 1 << 26
    est = model().estimate(add(n))
    nbytes = 3 * 4 * n
    assert est.bytes_moved == nbytes
    assert est.duration_ns == round(1000 + nbytes / (4.8e12 * 0.9) * 1e9 + 1000)
    assert est.kernel_class == "elementwise"


def test_other_gpu_scales_memory_bound_time_by_bandwidth():
    n = 1 << 28
    h200 = model(H200, kernel_gap_ns=0.0).estimate(add(n)).duration_ns - 1000
    h100 = model(H100, KernelDatabase("h100"), kernel_gap_ns=0.0).estimate(add(n)).duration_ns - 1000
    assert h100 / h200 == pytest.approx(4.8 / 3.35, rel=1e-3)


def test_unknown_op_gets_generic_memory_bound_estimate():
    op = OpCall("aten.some_new_op.default", (t((1024, 1024)),), (), (t((1024, 1024)),))
    est = model().estimate(op)
    assert est.source == "generic"
    assert est.duration_ns == round(1500 + 2 * 2 * 1024 * 1024 / (4.8e12 * 0.5) * 1e9 + 1000)


def test_views_and_scalar_reads_cost_no_gpu_time():
    view = OpCall("aten.view.default", (t((4, 4)), (16,)), (), (t((16,)),))
    assert model().estimate(view).duration_ns == 0


def test_database_hit_beats_analytic():
    db = KernelDatabase("h200")
    op = mm(4096, 4096, 4096)
    db.add(op, DbEntry(kernel_ns=12345, n_kernels=2, count=3, origin="micro_cold"))
    est = model(db=db).estimate(op)
    assert est.source == "measured"
    assert est.duration_ns == 12345 + 2 * 1000
    assert est.flops == 2 * 4096**3


def test_float_arguments_do_not_change_the_signature():
    a = OpCall("aten.mul.Tensor", (t((8,)), 0.5), (), (t((8,)),))
    b = OpCall("aten.mul.Tensor", (t((8,)), 0.25), (), (t((8,)),))
    c = OpCall("aten.mul.Tensor", (t((8,)), 2), (), (t((8,)),))
    assert signature(a) == signature(b) != signature(c)


def test_loose_match_ignores_exact_strides_but_not_contiguity():
    db = KernelDatabase("h200")
    base = OpCall("aten.add.Tensor", (t((1, 8)), t((1, 8))), (), (t((1, 8)),))
    db.add(base, DbEntry(777, 1, 1, "llama_step"))
    other_stride = OpCall("aten.add.Tensor", (t((1, 8), stride=(99, 1)), t((1, 8))), (), (t((1, 8)),))
    transposed = OpCall("aten.add.Tensor", (t((8, 2), stride=(1, 8)), t((8, 2))), (), (t((8, 2)),))
    assert db.lookup(other_stride)[1] == "loose"
    assert db.lookup(transposed) is None
    assert loose_signature(base) == loose_signature(other_stride)


def test_database_roundtrip_and_merge_prefers_in_step_measurements(tmp_path):
    op = add(1024)
    a = KernelDatabase("h200")
    a.add(op, DbEntry(1000, 1, 50, "micro_cold"))
    b = KernelDatabase("h200")
    b.add(op, DbEntry(1500, 1, 3, "llama_step"))
    merged = a.merge(b)
    assert merged.lookup(op)[0].kernel_ns == 1500
    path = tmp_path / "kernels.jsonl"
    merged.save(path)
    again = KernelDatabase.load(path)
    assert again.lookup(op)[0] == merged.lookup(op)[0]
    with pytest.raises(ValueError):
        a.merge(KernelDatabase("h100"))
    path.write_text('{"format": "something-else"}\n')
    with pytest.raises(ValueError, match="not a Phantora kernel database"):
        KernelDatabase.load(path)


def test_durations_are_rounded_not_truncated():
    est = model(kernel_gap_ns=0.0).estimate(
        OpCall("aten.add.Tensor", (t((1,), "float32"), t((1,), "float32")), (), (t((1,), "float32"),)))
    exact = 1000 + 12 / (4.8e12 * 0.9) * 1e9  # 1000.0028 ns
    assert est.duration_ns == round(exact) == 1000
    est = model(kernel_gap_ns=0.6).estimate(
        OpCall("aten.add.Tensor", (t((1,), "float32"), t((1,), "float32")), (), (t((1,), "float32"),)))
    assert est.duration_ns == 1001  # 1000.6028 rounds up


def _sdpa(s, causal, backward=False):
    q = t((1, 24, s, 128))
    if backward:
        args = (q, q, q, q, q, t((1, 24, s), "float32"), None, None, s, s, 0.0, causal, t((2,), "int64"), t((), "int64"))
        return OpCall("aten._scaled_dot_product_flash_attention_backward.default", args, (), (q, q, q))
    return OpCall("aten._scaled_dot_product_flash_attention.default", (q, q, q, 0.0, causal), (), (q,))


def test_causal_attention_does_half_the_flops():
    full = model().estimate(_sdpa(4096, False))
    causal = model().estimate(_sdpa(4096, True))
    assert full.flops == 4 * 24 * 4096 * 4096 * 128
    assert causal.flops / full.flops == pytest.approx(4097 / (2 * 4096))
    assert causal.duration_ns < 0.6 * full.duration_ns
    assert model().estimate(_sdpa(4096, True, backward=True)).flops == pytest.approx(2.5 * causal.flops)


def test_multi_tensor_apply_launch_count():
    assert mta_launches([65536 * 320], 1) == 1
    assert mta_launches([65536 * 321], 1) == 2
    assert mta_launches([10] * 110, 1) == 1
    assert mta_launches([10] * 111, 1) == 2
    assert mta_launches([10] * 111, 3) == 3  # 48 tensors per launch at depth 3


def test_foreach_time_counts_launches_and_bytes():
    params = tuple(t((1 << 20,), "float32") for _ in range(100))
    op = OpCall("aten._foreach_mul_.Scalar", (params, 0.9), (), ())
    est = model().estimate(op)
    launches = mta_launches([1 << 20] * 100, 1)
    nbytes = 2 * 100 * 4 * (1 << 20)  # read + write each tensor
    assert est.bytes_moved == nbytes
    assert est.duration_ns == round(launches * 2000 + nbytes / (4.8e12 * 0.8) * 1e9 + launches * 1000)


def test_estimates_are_cached():
    m = model()
    op = mm(512, 512, 512)
    assert m.estimate(op) is m.estimate(op)


def test_record_decoding():
    rec = {"name": "aten._foreach_add_.Scalar", "args": [{"rep": [3, {"T": [[4], "float32", [1], "cuda"]}]}, {"f": 1.0}],
           "kwargs": [["alpha", 2]], "outputs": []}
    op = decode_op(rec)
    assert op.args[0] == (t((4,), "float32"),) * 3 and op.args[1] == 1.0 and op.kwargs == (("alpha", 2),)


# ---------------------------------------------------------------------- the shipped H200 data

def test_packaged_analytic_model_is_close_on_big_gemm():
    m = ComputeModel(H200, KernelDatabase("h200"), load_profile("h200").calibration.value)
    est = m.estimate(mm(8192, 8192, 8192))
    assert est.duration_ns == pytest.approx(1.372e6, rel=0.10)  # measured 1371.9 µs on the H200


# ------------------------------------------- pointwise kernel paths (Note [Pointwise kernel paths])

PATHS_MEMORY = dict(CAL["memory"], **{
    "aten.mul": {"t0_ns": 1000.0, "bw_eff": 0.95},
    "elementwise_strided": {"t0_ns": 1000.0, "bw_eff": 0.5},
    "elementwise_cast": {"t0_ns": 1000.0, "bw_eff": 0.55},
    "elementwise_strided_cast": {"t0_ns": 1000.0, "bw_eff": 0.25},
    "copy": {"t0_ns": 1000.0, "bw_eff": 0.9},
    "copy_strided": {"t0_ns": 1000.0, "bw_eff": 0.3},
})


def _mul(a, b, out):
    return OpCall("aten.mul.Tensor", (a, b), (), (out,))


def test_broadcast_operand_takes_the_non_vectorized_path():
    m = model(memory=PATHS_MEMORY)
    x = t((4, 4096, 2048), "float32")
    same = _mul(x, x, x)
    weight = _mul(x, t((2048,), "float32"), x)  # RMSNorm's x * w
    row = _mul(x, t((4, 4096, 1), "float32"), x)  # x * rsqrt(mean)
    expanded = OpCall("aten.div.Scalar", (t((4, 4096, 2048), "float32", stride=(4096, 1, 0)), 2048), (), (x,))
    assert m._memory_kind(same, "elementwise") == "aten.mul"  # per-op fit: vectorized path only
    for op in (weight, row, expanded):
        assert m._memory_kind(op, "elementwise") == "elementwise_strided"
    nbytes = 2 * 4 * 4 * 4096 * 2048 + 4 * 2048
    assert m.estimate(weight).duration_ns == round(1000 + nbytes / (4.8e12 * 0.5) * 1e9 + 1000)


def test_cpu_scalar_is_not_a_broadcast_operand():
    m = model(memory=PATHS_MEMORY)
    x = t((1 << 20,), "float32")
    assert m._memory_kind(_mul(x, t((), "float32", device="cpu"), x), "elementwise") == "aten.mul"
    assert m._memory_kind(_mul(x, t((), "float32"), x), "elementwise") == "elementwise_strided"  # 0-dim CUDA tensor


def test_mixed_dtypes_take_the_casting_paths():
    m = model(memory=PATHS_MEMORY)
    res = t((4, 4096, 2048), "float32")
    proj = t((4, 4096, 2048), "bfloat16")
    add = OpCall("aten.add.Tensor", (res, proj), (), (res,))  # float32 residual + bfloat16 projection
    assert m._memory_kind(add, "elementwise") == "elementwise_cast"
    # RoPE: bfloat16 x[..., ::2] times a float32 table broadcast over batch and heads
    half = t((4, 4096, 32, 32), "bfloat16", stride=(8388608, 2048, 64, 2))
    rope = _mul(half, t((1, 4096, 1, 32), "float32"), t((4, 4096, 32, 32), "float32"))
    assert m._memory_kind(rope, "elementwise") == "elementwise_strided_cast"
    assert m.estimate(rope).duration_ns == round(1000 + default_bytes(rope) / (4.8e12 * 0.25) * 1e9 + 1000)
    # a bool mask is no cast
    where = OpCall("aten.where.self", (t((1 << 20,), "bool"), t((1 << 20,)), t((1 << 20,))), (), (t((1 << 20,)),))
    assert m._memory_kind(where, "elementwise") == "elementwise"
    # a calibration without the casting kinds costs them as the kind without "_cast"
    old = model(memory={k: v for k, v in PATHS_MEMORY.items() if not k.endswith("_cast")})
    assert old.estimate(rope).duration_ns == round(1000 + default_bytes(rope) / (4.8e12 * 0.5) * 1e9 + 1000)
    assert old.estimate(add).duration_ns == round(1000 + default_bytes(add) / (4.8e12 * 0.9) * 1e9 + 1000)


def test_stack_and_slice_backward_of_an_inner_dim_write_strided_slices():
    m = model(memory=PATHS_MEMORY)
    a = t((4, 4096, 32, 32), "float32")
    last = OpCall("aten.stack.default", ((a, a), -1), (), (t((4, 4096, 32, 32, 2), "float32"),))
    first = OpCall("aten.stack.default", ((a, a),), (), (t((2, 4, 4096, 32, 32), "float32"),))
    scalars = OpCall("aten.stack.default", (tuple(t((), "float32") for _ in range(8)),), (), (t((8,), "float32"),))
    assert m._memory_kind(last, "copy") == "copy_strided"
    assert m._memory_kind(first, "copy") == m._memory_kind(scalars, "copy") == "copy"
    g = t((4, 4096, 32, 32), "bfloat16")
    inner = OpCall("aten.slice_backward.default", (g, (4, 4096, 32, 64), 3, 0, 2**63 - 1, 2), (), (t((4, 4096, 32, 64)),))
    outer = OpCall("aten.slice_backward.default", (g, (8, 4096, 32, 32), 0, 0, 4, 1), (), (t((8, 4096, 32, 32)),))
    assert m._memory_kind(inner, "copy") == "copy_strided"
    assert m._memory_kind(outer, "copy") == "copy"
    assert m.estimate(last).duration_ns > 2.5 * m.estimate(first).duration_ns


def _cudnn(b, h, s, d):
    q = t((b, h, s, d))
    return OpCall("aten._scaled_dot_product_cudnn_attention.default", (q, q, q, None, True, 0.0, True), (), (q,))


def test_attention_pays_per_score_element_so_small_head_dims_are_slower_per_flop():
    cal = dict(CAL["attention"], cudnn_fwd={"t0_ns": 0.0, "row_ns": 0.0, "eff": 1.5, "pair_ns": 2e-4, "kernels": 1})
    m = model(attention=cal, kernel_gap_ns=0.0)
    d64, d128 = m.estimate(_cudnn(2, 32, 4096, 64)), m.estimate(_cudnn(1, 32, 4096, 128))
    assert d64.flops == d128.flops
    pairs = 32 * (32 * 33 // 2) * 128 * 128  # computed 128x128 tiles of one causal head-batch of 4096
    tile_flops = 4.0 * pairs * 128
    assert d128.duration_ns == round(tile_flops / (989.4e12 * 1.5) * 1e9 + 2e-4 * pairs)
    assert d64.duration_ns == round(tile_flops / (989.4e12 * 1.5) * 1e9 + 2e-4 * 2 * pairs)
    # FLOPs and softmax together never beat the dense peak (d=256 with these constants would)
    d256 = m.estimate(_cudnn(1, 16, 4096, 256))
    assert d256.duration_ns == round(tile_flops / 989.4e12 * 1e9)


def test_attention_with_a_narrower_value_head_counts_each_product_with_its_own_head_dim():
    """DeepSeek's latent attention: Q K^T over 192 dims, P V over 128; FLOPs 2 * pairs * (192 + 128)."""
    m = model(kernel_gap_ns=0.0)
    q, v = t((1, 16, 4096, 192)), t((1, 16, 4096, 128))
    mla = m.estimate(OpCall("aten._scaled_dot_product_cudnn_attention.default", (q, q, v, None, True, 0.0, True),
                            (), (v,)))
    pairs = 16 * 4096 * 4097 // 2
    assert mla.flops == 2.0 * pairs * (192 + 128)
    assert mla.flops < m.estimate(_cudnn(1, 16, 4096, 192)).flops


def test_fsdp2_copy_ops_cost_the_copies_their_cuda_implementations_run():
    """Note [FSDP2's copy ops]: all_gather_copy_in is a foreach copy into the all-gather buffer's slots;
    split_with_sizes_copy and chunk_cat read and write each byte once (chunk_cat widening to fp32)."""
    m = model(memory={**CAL["memory"], "copy": {"t0_ns": 1000.0, "bw_eff": 0.9},
                      "cast_up": {"t0_ns": 2000.0, "bw_eff": 0.45}})
    shards = (t((1 << 20,)), t((1 << 18,)))
    buffer = t((4 * ((1 << 20) + (1 << 18)),))
    copy_in = OpCall("fsdp.all_gather_copy_in.default", (shards, buffer, (1 << 20, 1 << 18), (1 << 20) + (1 << 18), 1),
                     (), (t(((1 << 20) + (1 << 18),)), buffer))
    est = m.estimate(copy_in)
    foreach = m.estimate(OpCall("aten._foreach_copy_.default", (tuple(t(s.shape) for s in shards), shards), (), ()))
    assert est.source == "analytic" and est.duration_ns == foreach.duration_ns
    assert default_bytes(copy_in) == 2 * 2 * ((1 << 20) + (1 << 18))  # the shards read, then written
    gathered = t((4, 1 << 20), "bfloat16", (1 << 20, 1))
    params = (t((4, 1 << 19), "bfloat16", (1 << 19, 1)), t((4, 1 << 19), "bfloat16", (1 << 19, 1)))
    split = m.estimate(OpCall("fsdp.split_with_sizes_copy.default", (gathered, (1 << 19, 1 << 19), 1),
                              (("out", params),), ()))
    nbytes = 2 * 2 * 4 * (1 << 20)
    assert (split.source, split.kernel_class, split.bytes_moved) == ("analytic", "copy", nbytes)
    assert split.duration_ns == round(1000 + nbytes / (4.8e12 * 0.9) * 1e9 + 1000)
    grads = (t((1 << 20,), "bfloat16"),)
    reduce_input = t((4, 1 << 18), "float32", (1 << 18, 1))
    cat = m.estimate(OpCall("fsdp.chunk_cat.default", (grads, 0, 4), (("out", reduce_input),), ()))
    nbytes = 2 * (1 << 20) + 4 * (1 << 20)
    assert (cat.source, cat.bytes_moved) == ("analytic", nbytes)
    assert cat.duration_ns == round(2000 + nbytes / (4.8e12 * 0.45) * 1e9 + 1000)


def test_grouped_gemms_cost_their_exact_flops_as_batched_gemms_of_the_mean_group():
    """Note [Grouped GEMMs]: forward (tokens x K by groups x K x N), input and weight gradients."""
    m = model()
    tokens, k, n, groups = 4096, 1024, 2048, 8
    forward = OpCall("aten._grouped_mm.default", (t((tokens, k)), t((groups, k, n)), t((groups,), "int32")), (),
                     (t((tokens, n)),))
    est = m.estimate(forward)
    assert (est.source, est.kernel_class, est.flops) == ("analytic", "gemm", 2.0 * tokens * k * n)
    batched = m.estimate(OpCall("aten.bmm.default", (t((groups, tokens // groups, k)), t((groups, k, n))), (),
                                (t((groups, tokens // groups, n)),)))
    assert est.duration_ns == pytest.approx(batched.duration_ns, rel=0.05)
    weight_grad = OpCall("aten._grouped_mm.default", (t((k, tokens), stride=(1, k)), t((tokens, n)),
                                                      t((groups,), "int32")), (), (t((groups, k, n)),))
    assert m.estimate(weight_grad).flops == 2.0 * tokens * k * n
    uneven = OpCall("aten._grouped_mm.default", (t((tokens + 5, k)), t((groups, k, n)), t((groups,), "int32")), (),
                    (t((tokens + 5, n)),))
    assert m.estimate(uneven).flops == 2.0 * (tokens + 5) * k * n


def test_python_bitwise_operators_on_tensors_are_elementwise():
    """`mask_a | mask_b` reaches the dispatcher as aten.__or__ (TorchTitan's tensor-parallel masks)."""
    for name in ("aten.__or__.Tensor", "aten.__and__.Tensor", "aten.__xor__.Tensor", "aten.__ior__.Tensor"):
        est = model().estimate(OpCall(name, (t((4096,), "bool"), t((4096,), "bool")), (), (t((4096,), "bool"),)))
        assert (est.source, est.kernel_class) == ("analytic", "elementwise"), name


def test_log_sigmoid_is_elementwise():
    """Context parallelism's attention merge (TorchTitan CP) calls log_sigmoid."""
    for name in ("aten.log_sigmoid.default", "aten.log_sigmoid_forward.default"):
        est = model().estimate(OpCall(name, (t((4096,), "float32"),), (), (t((4096,), "float32"),)))
        assert (est.source, est.kernel_class) == ("analytic", "elementwise"), name


# ------------------------------------------- norm backwards (Note [Norm backward's weight gradient])

NORM_MEMORY = dict(CAL["memory"], **{
    "norm": {"t0_ns": 2000.0, "bw_eff": 0.5, "kernels": 1},
    "aten._fused_rms_norm_backward": {"t0_ns": 1000.0, "bw_eff": 0.6, "kernels": 2},
    "norm_weight_grad": {"tile_ns": 800.0},
})


def _rms_backward(rows, hidden, dtype="bfloat16", weight=True, mask=(True, True)):
    x = t((rows, hidden), dtype)
    w = t((hidden,), dtype) if weight else None
    return OpCall("aten._fused_rms_norm_backward.default", (x, x, [hidden], t((rows, 1), "float32"), w, list(mask)), (),
                  (x,) + ((w,) if weight and mask[1] else ()))


def test_a_narrow_norm_backward_costs_more_per_byte_than_a_wide_one():
    """The weight gradient's blocks own 32 columns each and walk all rows: 256 columns give 8 blocks and 128 tiles
    in turn over 32768 rows, whatever the bytes."""
    m = model(memory=NORM_MEMORY)
    narrow, wide = _rms_backward(32768, 256), _rms_backward(4096, 2048)  # the same bytes
    assert default_bytes(narrow) == pytest.approx(default_bytes(wide), rel=0.01)
    bw = 4.8e12 * 0.6
    assert m.estimate(narrow).duration_ns == round(1000 + default_bytes(narrow) / bw * 1e9 + 128 * 800.0 + 2 * 1000)
    # the wide one's 64 blocks take 16 tiles each, about as long as re-reading its gradient and input
    reread = 2 * 4096 * 2048 * 2 / bw * 1e9
    assert m.estimate(wide).duration_ns == round(1000 + default_bytes(wide) / bw * 1e9 + max(reread, 16 * 800.0) + 2000)
    assert m.estimate(narrow).duration_ns > 3 * m.estimate(wide).duration_ns
    # a calibration without the tile term costs both by their bytes alone
    old = model(memory={k: v for k, v in NORM_MEMORY.items() if k != "norm_weight_grad"})
    assert old.estimate(narrow).duration_ns == pytest.approx(old.estimate(wide).duration_ns, rel=0.02)


def test_norm_backward_over_many_rows_splits_them_over_blocks():
    """Above 65536 rows and with fewer than SMs/2 blocks, PyTorch splits the rows: partial sums, then a third kernel."""
    m = model(memory=NORM_MEMORY)
    at_limit, split = _rms_backward(65536, 256), _rms_backward(65537, 256)
    bw = 4.8e12 * 0.6
    assert m.estimate(at_limit).duration_ns == round(1000 + default_bytes(at_limit) / bw * 1e9 + 256 * 800.0 + 2000)
    reread = 2 * 65537 * 256 * 2
    assert m.estimate(split).duration_ns == round(1000 + (default_bytes(split) + reread) / bw * 1e9 + 3000)
    assert m.estimate(split).duration_ns < m.estimate(at_limit).duration_ns / 2
    # wide rows keep one block per 32 columns even past 65536 rows
    assert m.estimate(_rms_backward(65537, 4096)).duration_ns > 257 * 800.0


def test_norm_backward_without_a_weight_gradient_runs_the_input_gradient_alone():
    m = model(memory=NORM_MEMORY)
    bw = 4.8e12 * 0.6
    for op in (_rms_backward(32768, 256, weight=False), _rms_backward(32768, 256, mask=(True, False))):
        assert m.estimate(op).duration_ns == round(1000 + default_bytes(op) / bw * 1e9 + 1000)


# ------------------------------------------- strided concatenation (Note [Strided concatenation])

CAT_MEMORY = dict(CAL["memory"], **{
    "copy": {"t0_ns": 1000.0, "bw_eff": 0.9},
    "cat_strided": {"t0_ns": 5000.0, "elem_ns": 0.001, "dim_elem_ns": 0.001, "parallel_inputs": 1.6, "bw_eff": 0.6},
})


def _cat(*parts, dim=-1, dtype="bfloat16"):
    """`torch.cat(parts, dim)`; a part is (shape, stride) or a shape (contiguous)."""
    ins = tuple(t(p[0], dtype, p[1]) if isinstance(p[1], tuple) else t(p, dtype) for p in parts)
    shape = list(ins[0].shape)
    shape[dim] = sum(x.shape[dim] for x in ins)
    return OpCall("aten.cat.default", (ins, dim), (), (t(shape, dtype),))


# DeepSeek-V3's query: the first 128 of 192 columns of each head, and a contiguous 64-column part
Q_NOPE = ((8, 4096, 16, 128), (12582912, 3072, 192, 1))
Q_PE = (8, 4096, 16, 64)


def test_a_strided_cat_costs_per_element_not_per_byte():
    """CatArrayBatchedCopy copies one element per thread, so bfloat16 and float32 take the same time: the larger
    input's elements at its own blocks' rate (128 + 64 of 192 columns: 67 M of 101 M elements), 4 dims."""
    m = model(memory=CAT_MEMORY)
    bf16, fp32 = _cat(Q_NOPE, Q_PE), _cat(Q_NOPE, Q_PE, dtype="float32")
    per_element = 0.001 + 0.001 * 4
    largest = 8 * 4096 * 16 * 128 * per_element  # above all of them at 1.6 inputs' worth, and above the bytes
    assert m.estimate(bf16).duration_ns == round(5000 + largest + 1000)
    assert m.estimate(fp32).duration_ns == m.estimate(bf16).duration_ns
    assert default_bytes(fp32) == 2 * default_bytes(bf16)
    # two equal inputs share the SMs: all the elements at 1.6 inputs' worth
    pair = _cat(Q_NOPE, Q_NOPE)
    assert m.estimate(pair).duration_ns == round(5000 + 2 * 8 * 4096 * 16 * 128 * per_element / 1.6 + 1000)


def test_an_expanded_input_does_not_make_a_strided_cat_cheaper():
    """DeepSeek-V3's key: a rotary part shared by the 16 heads (stride 0), read once but copied per element."""
    m = model(memory=CAT_MEMORY)
    k_nope = ((8, 4096, 16, 128), (16777216, 4096, 256, 1))
    expanded = _cat(k_nope, ((8, 4096, 16, 64), (262144, 64, 0, 1)))
    materialized = _cat(k_nope, (8, 4096, 16, 64))
    assert default_bytes(expanded) < default_bytes(materialized)
    assert m.estimate(expanded).duration_ns == m.estimate(materialized).duration_ns


def test_a_cat_of_contiguous_inputs_streams_its_bytes():
    m = model(memory=CAT_MEMORY)
    op = _cat((8, 4096, 16, 128), Q_PE)
    assert m.estimate(op).duration_ns == round(1000 + default_bytes(op) / (4.8e12 * 0.9) * 1e9 + 1000)


def test_a_cat_the_batched_kernel_cannot_take_copies_its_inputs_by_bytes():
    """Five dims, or mixed dtypes: PyTorch copies each input into its slice of the output (a strided copy)."""
    m = model(memory=dict(CAT_MEMORY, copy_strided={"t0_ns": 2000.0, "bw_eff": 0.4}))
    five = _cat(((2, 8, 4096, 16, 128), (25165824, 3145728, 768, 48, 1)), (2, 8, 4096, 16, 64))
    assert m.estimate(five).duration_ns == round(2000 + default_bytes(five) / (4.8e12 * 0.4) * 1e9 + 1000)
    # a calibration without the strided cat's terms costs it as a strided copy, too
    without = {k: v for k, v in CAT_MEMORY.items() if k != "cat_strided"}
    old = model(memory=without | {"copy_strided": {"t0_ns": 2000.0, "bw_eff": 0.4}})
    four = _cat(Q_NOPE, Q_PE)
    assert old.estimate(four).duration_ns == round(2000 + default_bytes(four) / (4.8e12 * 0.4) * 1e9 + 1000)
    assert model(memory=CAT_MEMORY).estimate(four).duration_ns > 1.5 * old.estimate(four).duration_ns


# ------------------------------------------- index_put_ (Note [index_put_'s two kernels])

INDEX_MEMORY = dict(CAL["memory"], **{
    "copy": {"t0_ns": 1000.0, "bw_eff": 0.9},
    "index": {"t0_ns": 2000.0, "bw_eff": 0.5},
    "index_put": {"t0_ns": 4000.0, "elem_ns": 0.005, "kernels": 1},
    "index_put_accumulate": {"t0_ns": 36000.0, "index_ns": 0.05, "step_ns": 0.3, "range_check_ns": 18000.0,
                             "kernels": 13},
})


def _index_put(rows, n, width, dtype="bfloat16", accumulate=False, name="aten.index_put_.default", unsafe=None):
    target = t((rows, width), dtype)
    args = (target, (t((n,), "int64"),), t((n, width), dtype), accumulate) + (() if unsafe is None else (unsafe,))
    return OpCall(name, args, (), (target,))


def test_index_put_without_accumulation_costs_per_element_written():
    """A thread per element (index_elementwise_kernel): DeepSeek-V3's scatter of 137200 rows of 256, whatever the
    element's width."""
    m = model(memory=INDEX_MEMORY)
    bf16, fp32 = _index_put(137163, 137200, 256), _index_put(137163, 137200, 256, "float32")
    assert m.estimate(bf16).duration_ns == round(4000 + 137200 * 256 * 0.005 + 1000)
    assert m.estimate(fp32).duration_ns == m.estimate(bf16).duration_ns


def test_index_put_with_accumulation_costs_a_sort_and_a_warp_step_per_index_and_128_columns():
    m = model(memory=INDEX_MEMORY)
    # autograd's backward of a gather: no range check; 98304 indices into 32768 rows of 256 columns: 2 steps each
    backward = _index_put(32768, 98304, 256, accumulate=True, name="aten._index_put_impl_.default", unsafe=True)
    sort_and_add = 36000 + 98304 * 0.05 + 98304 * 2 * 0.3
    assert m.estimate(backward).duration_ns == round(sort_and_add + 13 * 1000)
    # called directly, index_put_ checks the indices' range first: 6 more kernels
    direct = _index_put(32768, 98304, 256, accumulate=True)
    assert m.estimate(direct).duration_ns == round(sort_and_add + 18000 + 19 * 1000)
    # far more than the bytes it moves
    bytes_only = model(memory=CAL["memory"] | {"index": INDEX_MEMORY["index"]})
    assert m.estimate(backward).duration_ns > 2 * bytes_only.estimate(backward).duration_ns
    # the out-of-place index_put copies self first
    functional = _index_put(32768, 98304, 256, accumulate=True, name="aten.index_put.default")
    copy = 1000 + 2 * 32768 * 256 * 2 / (4.8e12 * 0.9) * 1e9 + 1000
    assert m.estimate(functional).duration_ns == round(sort_and_add + 18000 + 19 * 1000 + copy)


def test_a_boolean_mask_index_put_keeps_the_bytes_model():
    """`x[mask] = 0` takes masked_fill's path: the index class's bytes."""
    m = model(memory=INDEX_MEMORY)
    x = t((2, 4096, 2048))
    op = OpCall("aten.index_put_.default", (x, (t((2, 4096), "bool"),), t((), "bfloat16")), (), (x,))
    assert m.estimate(op).duration_ns == round(2000 + default_bytes(op) / (4.8e12 * 0.5) * 1e9 + 1000)


# ------------------------------------------- norm rows (Note [Norms pay per row])

ROW_MEMORY = dict(NORM_MEMORY, **{
    "strided_copy": {"t0_ns": 1500.0, "bw_eff": 0.3},
    "aten._fused_rms_norm": {"t0_ns": 2000.0, "bw_eff": 0.8, "row_ns": 0.5, "kernels": 1},
    "aten._fused_rms_norm_backward": {"t0_ns": 1000.0, "bw_eff": 0.6, "row_ns": 0.4, "kernels": 2},
    "norm_rows": {"l1_row_bytes": 1e9},
})


def _rms_forward(rows, hidden, dtype="bfloat16", stride=None):
    x = t((rows, hidden), dtype, stride)
    return OpCall("aten._fused_rms_norm.default", (x, [hidden], t((hidden,), dtype), None), (),
                  (t((rows, hidden), dtype), t((rows, 1), "float32")))


def test_a_narrow_norm_forward_pays_per_row():
    """A block per row: 32768 rows of 256 columns cost 28672 rows' latency more than 4096 rows of 2048, the same
    bytes."""
    m = model(memory=ROW_MEMORY)
    narrow, wide = _rms_forward(32768, 256), _rms_forward(4096, 2048)
    bw = 4.8e12 * 0.8
    assert m.estimate(narrow).duration_ns == round(2000 + default_bytes(narrow) / bw * 1e9 + 32768 * 0.5 + 1000)
    assert m.estimate(narrow).duration_ns - m.estimate(wide).duration_ns == pytest.approx(
        (default_bytes(narrow) - default_bytes(wide)) / bw * 1e9 + 28672 * 0.5, abs=1)
    # a calibration without the row term costs them by their bytes alone
    bytes_only = dict(ROW_MEMORY, **{"aten._fused_rms_norm": {"t0_ns": 2000.0, "bw_eff": 0.8}})
    old = model(memory=bytes_only)
    assert old.estimate(narrow).duration_ns == pytest.approx(old.estimate(wide).duration_ns, rel=0.01)


def test_the_norm_backwards_input_gradient_pays_per_row():
    m = model(memory=ROW_MEMORY)
    without = model(memory=dict(ROW_MEMORY, **{"aten._fused_rms_norm_backward": {"t0_ns": 1000.0, "bw_eff": 0.6,
                                                                                 "kernels": 2}}))
    for op in (_rms_backward(32768, 256), _rms_backward(32768, 256, weight=False)):
        assert m.estimate(op).duration_ns - without.estimate(op).duration_ns == round(32768 * 0.4)


def test_a_norms_second_pass_reads_again_what_l1_does_not_keep():
    """A row keeps `l1_row_bytes` (here 4 KB) of its second pass in L1: a forward over 2048 bfloat16 columns reads
    nothing again, one over 8192 reads 12 KB of each 16 KB row again. The backward's second pass covers the input and
    the output gradient: 16 KB a row at 4096 columns."""
    m = model(memory=dict(ROW_MEMORY, norm_rows={"l1_row_bytes": 4096.0}))
    bw = 4.8e12 * 0.8
    fits, misses = _rms_forward(8192, 2048), _rms_forward(2048, 8192)
    assert m.estimate(fits).duration_ns == round(2000 + default_bytes(fits) / bw * 1e9 + 8192 * 0.5 + 1000)
    assert m.estimate(misses).duration_ns == round(2000 + (default_bytes(misses) + 2048 * (16384 - 4096)) / bw * 1e9
                                                   + 2048 * 0.5 + 1000)
    back = _rms_backward(2048, 4096, weight=False)
    assert m.estimate(back).duration_ns == round(1000 + (default_bytes(back) + 2048 * (16384 - 4096)) / (4.8e12 * 0.6)
                                                 * 1e9 + 2048 * 0.4 + 1000)


def test_a_strided_norm_input_is_copied_first():
    """expect_contiguous(): DeepSeek-V3 normalizes the first 512 of 576 columns, after a strided copy of them."""
    m = model(memory=ROW_MEMORY)
    strided, dense = _rms_forward(32768, 512, stride=(576, 1)), _rms_forward(32768, 512)
    copy = 1500 + 2 * 32768 * 512 * 2 / (4.8e12 * 0.3) * 1e9 + 1000
    assert m.estimate(strided).duration_ns == pytest.approx(m.estimate(dense).duration_ns + copy, abs=1)
