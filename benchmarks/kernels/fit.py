"""Fit the analytic compute model to one GPU's measurements and rebuild its kernel database.

    python -m benchmarks.kernels.fit [--gpu h200] [--specs DIR] [--only cat_strided,index_put,norm]

Reads data/<gpu>/kernels/{micro,in_step}/*/*_ops*.jsonl.gz (raw measurements from measure_micro.py and
measure_in_step.py) and the accuracy benchmark's ops measured by `phantora profile`
(data/<gpu>/kernels/micro/coverage_all/, converted to in-step times: dataset.py, Note [Microbenchmark to
step]), writes
  src/phantora/specs/<gpu>/kernels.jsonl     measured database (median kernel time per signature)
  src/phantora/specs/<gpu>/calibration.json  fitted analytic-model constants
Deterministic: same data in, same files out. `--only` refits some term groups alone into the calibration file there.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common.paths import SPECS, relative
from benchmarks.kernels import dataset
from benchmarks.kernels.dataset import Obs, in_step_observations, load_observations
from phantora.models.compute import (
    INDEX_PUT_RANGE_CHECK_KERNELS, NORM_BACKWARD_OPS, NORM_FORWARD_OPS, FUSED_OPTIMIZER_OPS, Calibration, ComputeModel,
    DbEntry, IndexPut, KernelDatabase, classify, default_bytes, index_put, norm_rows,
    norm_second_pass_bytes, norm_weight_grad, packet_name, strided_cat,
)
from phantora.specs import get_gpu_spec

GPU = get_gpu_spec(dataset.GPU)
"""The GPU fitted (`use_gpu`)."""

# Not measured yet: host<->device copies (PCIe Gen5 x16, 64 GB/s per direction by the H200 datasheet;
# ~80% of it is typical for pinned memory). Overwritten by a fit when data/h200 has h2d/d2h copies.
LINK_DEFAULT = {"t0_ns": 5000.0, "bytes_per_s": 50e9}


def use_gpu(key: str) -> None:
    """Fit `key`'s measurements (data/<key>/kernels/) into its own specs/<key>/ files."""
    global GPU
    GPU = get_gpu_spec(key)
    dataset.use_gpu(key)


def base_calibration() -> dict:
    return {
        "reference_gpu": GPU.key,
        "kernel_gap_ns": 0.0,
        "gemm": {
            "modes": {"bf16": {"eff": 0.83, "eff_unaligned": 0.15}, "fp32": {"eff": 0.77, "eff_unaligned": 0.6}},
            "tiles": gemm_tile_rules(), "split_k_min": 256, "max_split": MAX_SPLIT, "bw_eff": 0.7, "t0_ns": 2000.0,
            "two_kernel_mn": 12_000_000,
        },
        "attention": {"reference_peak_flops": GPU.peak_flops["bf16"],
                      "reference_bandwidth_bytes_per_s": GPU.memory_bandwidth_bytes_per_s},
        "memory": {"generic": {"t0_ns": 2000.0, "bw_eff": 0.6}, "h2d": dict(LINK_DEFAULT), "d2h": dict(LINK_DEFAULT)},
        "foreach": {"default": {"launch_ns": 5000.0, "bw_eff": 0.8}},
    }


def model_for(cal: dict) -> ComputeModel:
    return ComputeModel(GPU, KernelDatabase(GPU.key), Calibration.from_dict(cal))


def log_err(pred: float, meas: float) -> float:
    return math.log(max(pred, 1.0) / max(meas, 1.0))


# ----------------------------------------------------------------------------- gemm


MAX_SPLIT = 16
"""The most slices of K the GEMM model splits into (Note [GEMM tile choice]). Not fitted and not measured: the
kernel names say that cuBLAS split K, not how deep; split_k_min (the shallowest slice) is fitted under it."""


def gemm_tile_rules() -> dict:
    """The tile shapes cuBLAS chooses from, per kernel family (Note [GEMM tile choice]), as the kernel names of the
    measured GEMMs show them (`tile_shapes_seen` prints them): tensor-core kernels (nvjet_sm90_tst_AxB_...) with one
    side 64, 128, 192 or 256 and the other a multiple of 8, at most 40960 outputs (256x160, 320x128); CUDA-core
    float32 kernels (cutlass_80_simt_sgemm_AxB_..., sm80_xmma_gemm_f32f32_..._tilesizeAxBx8) with sides 32 to 256,
    at most 256x128. `shape_c` starts at 8 and is fitted."""
    return {"tensor": {"sides": [64, 128, 192, 256], "free": list(range(8, 321, 8)), "max_area": 40960, "shape_c": 8.0},
            "simt": {"sides": [32, 64, 128, 256], "free": [32, 64, 128, 256], "max_area": 32768, "shape_c": 8.0}}


def tile_shapes_seen(obs: list[Obs]) -> dict[str, dict[tuple[int, int], int]]:
    """(family -> tile shape -> GEMM signatures) of the measured kernels' names: what cuBLAS chose."""
    seen: dict[str, dict[tuple[int, int], int]] = {"tensor": defaultdict(int), "simt": defaultdict(int)}
    for o in obs:
        if classify(o.op.name) != "gemm":
            continue
        for name in o.kernels:
            shape = kernel_tile(name)
            if shape is not None:
                seen[shape[0]][shape[1:]] += 1
                break
    return {family: dict(sorted(shapes.items(), key=lambda x: -x[1])) for family, shapes in seen.items()}


def kernel_tile(name: str) -> tuple[str, int, int] | None:
    """(family, A, B) of a cuBLAS / CUTLASS GEMM kernel's name that says its tile (A x B), else None."""
    import re
    if (hit := re.search(r"nvjet_sm\d+_tst_(\d+)x(\d+)_", name)) or (hit := re.search(r"tensorop_\w*?gemm_\w*?_(\d+)x(\d+)_", name)):
        return "tensor", int(hit[1]), int(hit[2])
    if (hit := re.search(r"simt_sgemm_(\d+)x(\d+)_", name)) or (hit := re.search(r"f32f32_\w*?tilesize(\d+)x(\d+)x", name)):
        return "simt", int(hit[1]), int(hit[2])
    return None


def fit_gemm(cal: dict, obs: list[Obs]) -> None:
    g = [o for o in obs if classify(o.op.name) == "gemm"]
    if not g:
        return

    def loss(c: dict) -> float:
        m = model_for(c)
        return sum(log_err(m._gemm(o.op).duration_ns, o.kernel_ns) ** 2 for o in g) / len(g)

    gc = cal["gemm"]
    keys = [("modes", "bf16", "eff"), ("modes", "bf16", "eff_unaligned"), ("modes", "fp32", "eff"),
            ("modes", "fp32", "eff_unaligned"), ("bw_eff",), ("t0_ns",), ("split_k_min",),
            ("tiles", "tensor", "shape_c"), ("tiles", "simt", "shape_c")]

    def get(k):
        d = gc
        for p in k[:-1]:
            d = d[p]
        return d[k[-1]]

    def put(k, v):
        d = gc
        for p in k[:-1]:
            d = d[p]
        d[k[-1]] = v

    _coord_search(cal, keys, get, put, loss, rounds=5)
    for mode, src in (("fp16", "bf16"), ("fp8", "bf16"), ("tf32", "bf16"), ("fp64", "fp32")):
        gc["modes"].setdefault(mode, dict(gc["modes"][src]))
    gc["unmeasured_modes"] = "fp16/fp8/tf32 copy the bf16 efficiencies and fp64 the fp32 ones (not measured)"


def _coord_search(cal, keys, get, put, loss, rounds=4) -> float:
    cur = loss(cal)
    for _ in range(rounds):
        for k in keys:
            for f in (1.5, 1 / 1.5, 1.15, 1 / 1.15, 1.04, 1 / 1.04):
                old = get(k)
                new = old * f
                if k[-1] in ("eff", "eff_unaligned", "bw_eff"):
                    new = min(new, 1.5 if k[-1] == "bw_eff" else 1.0)
                put(k, new)
                val = loss(cal)
                if val < cur - 1e-12:
                    cur = val
                else:
                    put(k, old)
    return cur


# ----------------------------------------------------------------------------- attention


def fit_attention(cal: dict, obs: list[Obs]) -> None:
    m = model_for(cal)
    groups: dict[str, list] = defaultdict(list)
    for o in obs:
        if classify(o.op.name) == "attention":
            a = m._attention_features(o.op)
            groups[f"{a['backend']}_{'bwd' if a['backward'] else 'fwd'}"].append((a, o))
    peak = GPU.peak_flops["bf16"]
    for key in sorted(groups, key=lambda k: (not k.startswith("flash"), k)):
        pts = groups[key]
        y = np.array([o.kernel_ns for _, o in pts], dtype=float)
        kernels = int(statistics.median(o.n_kernels for _, o in pts))
        # per score element (tile_pairs): identifiable only where head dims differ (64 and 128 here)
        vary_d = len({a["d"] for a, _ in pts}) > 1
        if len(pts) >= 6:
            X = np.array([[1.0, a["rows"], a["tile_flops"] / peak * 1e9] + ([a["tile_pairs"]] if vary_d else [])
                          for a, _ in pts])
            coef = _wnnls(X, y)
            t0, row_ns, inv_eff = coef[:3]
            cal["attention"][key] = {"t0_ns": t0, "row_ns": row_ns, "eff": 1.0 / max(inv_eff, 1e-3), "kernels": kernels,
                                     "points": len(pts), "pair_ns": float(coef[3]) if vary_d else 0.0}
        else:  # few points (cuDNN): keep flash's fixed costs, fit the rate (and the per-pair cost) alone
            ref = cal["attention"].get(f"flash_{key.split('_')[1]}", {"t0_ns": 5000.0, "row_ns": 0.0})
            rest = y - ref["t0_ns"] - ref["row_ns"] * np.array([a["rows"] for a, _ in pts])
            X = np.array([[a["tile_flops"] / peak * 1e9] + ([a["tile_pairs"]] if vary_d else []) for a, _ in pts])
            coef = _wnnls_rel(X, rest, y)
            cal["attention"][key] = {"t0_ns": ref["t0_ns"], "row_ns": ref["row_ns"], "eff": 1.0 / max(coef[0], 1e-3),
                                     "kernels": kernels, "points": len(pts), "pair_ns": float(coef[1]) if vary_d else 0.0}


def _wnnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares of relative error with non-negative coefficients (active-set by dropping)."""
    return _wnnls_rel(X, y, y)


def _wnnls_rel(X: np.ndarray, y: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Least squares of X·coef = y, each row's error relative to `scale`, coefficients >= 0."""
    w = 1.0 / scale
    active = list(range(X.shape[1]))
    coef = np.zeros(X.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(X[:, active] * w[:, None], y * w, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return coef


# ----------------------------------------------------------------------------- memory-bound

OWN_MODEL_KINDS = ("cat_strided", "index_put", "index_put_accumulate")
"""Memory kinds whose time is not bytes at a fitted bandwidth (Notes [Strided concatenation] and [index_put_'s two
kernels] in models/compute.py): each has a fit of its own, and they stay out of the pooled `generic` fit."""
TERMS = ("cat_strided", "index_put", "norm")
"""The term groups `--only` refits alone: the strided concatenation, index_put_'s two paths, the norms' rows and
tiles (forward and backward)."""


@dataclass
class MemoryGroups:
    """The memory-bound observations, grouped the ways the fits read them."""

    by_kind: dict[str, list[Obs]]
    """Per memory kind with a bytes model (`h2d`/`d2h`: per link)."""
    by_packet: dict[str, list[Obs]]
    """Per op, its vectorized-path calls: candidates for a fit of the op's own."""
    every: list[Obs]
    """Elementwise, copy and reduction calls with a bytes model: the pooled `generic` fit."""
    own_model: dict[str, list[Obs]]
    """Per kind of OWN_MODEL_KINDS."""


def memory_groups(obs: list[Obs]) -> MemoryGroups:
    m = model_for(base_calibration())  # kinds by the ops' structure alone, no per-op entries yet
    groups = MemoryGroups(defaultdict(list), defaultdict(list), [], defaultdict(list))
    for o in obs:
        cls = classify(o.op.name)
        if cls in (None, "gemm", "attention", "foreach") or o.kernel_ns <= 0:
            continue
        kind = m._memory_kind(o.op, cls)
        if kind in OWN_MODEL_KINDS:
            groups.own_model[kind].append(o)
            continue
        groups.by_kind[kind].append(o)
        if kind in ("h2d", "d2h"):
            continue
        if cls != "copy" and not kind.endswith(("_strided", "_cast")):  # per-op fits: vectorized path only
            groups.by_packet[packet_name(o.op.name)].append(o)
        if cls in ("elementwise", "copy", "reduction"):
            groups.every.append(o)
    return groups


def per_op_groups(by_packet: dict[str, list[Obs]]) -> dict[str, list[Obs]]:
    """The ops with enough calls over a wide enough range of sizes to fit their own constants."""
    out = {}
    for p, pts in sorted(by_packet.items()):
        sizes = [default_bytes(o.op) for o in pts]
        if len(pts) >= 5 and max(sizes) >= 8 * max(1.0, min(sizes)) and max(sizes) >= 4 * 2**20:
            out[p] = pts
    return out


def fit_memory(cal: dict, obs: list[Obs]) -> None:
    groups = memory_groups(obs)
    mem = cal["memory"]
    bw = GPU.memory_bandwidth_bytes_per_s
    for kind, pts in sorted(groups.by_kind.items()):
        if kind in ("h2d", "d2h"):
            # pinned host memory only: pageable copies depend on the host's memory system
            # (measured 5-30x slower here, in a VM); OpCall cannot tell them apart.
            pts = [o for o in pts if "pinned" in (o.cfg or {}).get("op", "")] or pts
            moved = np.array([sum(_nbytes(t) for t in o.op.outputs) for o in pts], dtype=float)
            y = np.array([o.kernel_ns for o in pts], dtype=float)
            t0, inv = _wnnls(np.stack([np.ones_like(moved), moved], 1), y)
            mem[kind] = {"t0_ns": t0, "bytes_per_s": 1e9 / max(inv, 1e-6), "points": len(pts)}
            continue
        mem[kind] = _fit_linear(pts, bw)
    for p, pts in per_op_groups(groups.by_packet).items():
        if p not in NORM_BACKWARD_OPS and p not in NORM_FORWARD_OPS:
            mem[p] = _fit_linear(pts, bw)
    fit_terms(mem, groups, TERMS)
    mem["generic"] = _fit_linear(groups.every, bw)


def fit_terms(mem: dict, groups: MemoryGroups, terms: tuple[str, ...]) -> None:
    """Fit the term groups `terms` (of TERMS) into `mem`, the calibration's memory section."""
    bw = GPU.memory_bandwidth_bytes_per_s
    own = groups.own_model
    if "cat_strided" in terms and own.get("cat_strided"):
        mem["cat_strided"] = fit_cat_strided(own["cat_strided"], bw)
    if "index_put" in terms and own.get("index_put"):
        mem["index_put"] = fit_index_put(own["index_put"])
    if "index_put" in terms and own.get("index_put_accumulate"):
        mem["index_put_accumulate"] = fit_index_put_accumulate(own["index_put_accumulate"])
    if "norm" in terms:
        per_op = per_op_groups(groups.by_packet)
        fit_norms(mem, {p: pts for p, pts in per_op.items() if p in NORM_FORWARD_OPS},
                  {p: pts for p, pts in per_op.items() if p in NORM_BACKWARD_OPS}, bw)


def fit_norms(mem: dict, forward: dict[str, list[Obs]], backward: dict[str, list[Obs]], bw: float) -> None:
    """The norms' constants (Notes [Norms pay per row] and [Norm backward's weight gradient] in models/compute.py):
    `l1_row_bytes`, the share of a row's second pass L1 keeps, fitted on the forwards (a kernel each, nothing else in
    their time) by the least summed loss, on a log grid from 256 bytes to 64 KB refined by golden section; then each
    op's own constants and the weight gradient's, the backwards' input gradient taking the same share (it runs the
    same two passes)."""
    l1_row_bytes = _argmin_log(lambda v: fit_norm_forward(forward, bw, v)[0], 256.0, 65536.0)
    mem.update(fit_norm_forward(forward, bw, l1_row_bytes)[1])
    if backward:
        mem.update(fit_norm_backward(backward, bw, l1_row_bytes)[1])
    mem["norm_rows"] = {"l1_row_bytes": l1_row_bytes, "points": sum(len(pts) for pts in forward.values())}


def fit_norm_forward(groups: dict[str, list[Obs]], bw: float, l1_row_bytes: float) -> tuple[float, dict]:
    """Each norm forward's t0, bandwidth efficiency and time per row (Note [Norms pay per row] in models/compute.py),
    by least squares on relative error; the summed loss and the entries."""
    loss, out = 0.0, {}
    for p, pts in groups.items():
        y = np.array([o.kernel_ns for o in pts], dtype=float)
        X = np.array([[1.0, (default_bytes(o.op) + norm_second_pass_bytes(o.op, l1_row_bytes)) / bw * 1e9,
                       norm_rows(o.op)] for o in pts])
        t0, inv, row_ns = _wnnls(X, y)
        t0 = max(t0, 300.0)
        loss += float(np.sum(((X[:, 1] * inv + X[:, 2] * row_ns + t0) / y - 1) ** 2))
        out[p] = {"t0_ns": t0, "bw_eff": min(2.0, 1.0 / max(inv, 0.05)), "row_ns": row_ns,
                  "kernels": int(statistics.median(o.n_kernels for o in pts)), "points": len(pts)}
    return loss, out


def fit_norm_backward(groups: dict[str, list[Obs]], bw: float, l1_row_bytes: float) -> tuple[float, dict]:
    """The norm backwards' constants (Notes [Norm backward's weight gradient] and [Norms pay per row] in
    models/compute.py): `tile_ns`, the time one block of the weight-gradient kernel takes per tile of rows, shared by
    the ops, and each op's t0, bandwidth efficiency and time per row of the input gradient, by least squares on
    relative error; the summed loss and the entries. `tile_ns` is searched on a log grid and refined by golden section;
    for each value, each op's efficiency likewise, with its t0 and row time by least squares."""
    rows = {p: [((default_bytes(o.op) + norm_second_pass_bytes(o.op, l1_row_bytes)) / bw * 1e9,
                 _tiles_and_reread(o.op, bw), norm_rows(o.op), o.kernel_ns) for o in pts] for p, pts in groups.items()}

    def op_fit(r: list, tile_ns: float) -> tuple[float, float, float, float]:
        y = np.array([k for *_, k in r])
        x = np.array([b for b, *_ in r])
        reread = np.array([g[1] for _, g, _, _ in r])
        serial = np.array([g[0] * tile_ns for _, g, _, _ in r])
        per_row = np.stack([np.ones_like(y), np.array([m for _, _, m, _ in r], dtype=float)], 1)

        def at(inv: float) -> tuple[float, float, float]:
            f = inv * x + np.maximum(inv * reread, serial)
            t0, row_ns = _wnnls_rel(per_row, y - f, y)
            t0 = max(300.0, t0)
            return float(np.sum(((t0 + row_ns * per_row[:, 1] + f) / y - 1) ** 2)), t0, row_ns

        inv = _argmin_log(lambda v: at(v)[0], 0.5, 20.0)
        loss, t0, row_ns = at(inv)
        return loss, t0, inv, row_ns

    tile_ns = _argmin_log(lambda t: sum(op_fit(r, t)[0] for r in rows.values()), 10.0, 10000.0)
    loss, out = 0.0, {}
    for p, r in rows.items():
        op_loss, t0, inv, row_ns = op_fit(r, tile_ns)
        loss += op_loss
        out[p] = {"t0_ns": t0, "bw_eff": min(2.0, 1.0 / inv), "row_ns": row_ns,
                  "kernels": int(statistics.median(o.n_kernels for o in groups[p])), "points": len(r)}
    out["norm_weight_grad"] = {"tile_ns": tile_ns, "points": sum(len(r) for r in rows.values())}
    return loss, out


def fit_cat_strided(pts: list[Obs], bw: float) -> dict:
    """The strided concatenation's constants (Note [Strided concatenation] in models/compute.py), by least squares on
    relative error: `parallel_inputs` by golden section over 1-4 inputs' worth; for each value, t0, the per-element
    times and the bytes' efficiency by linear least squares for each split of the calls into element-bound and
    bytes-bound (ordered by how close their bytes come to bounding them), keeping the split whose max model fits
    best."""
    cats = [strided_cat(o.op) for o in pts]
    y = np.array([o.kernel_ns for o in pts], dtype=float)
    streamed = np.array([default_bytes(o.op) / bw * 1e9 for o in pts])
    dims = np.array([c.dims for c in cats], dtype=float)
    largest = np.array([max(c.elements) for c in cats], dtype=float)
    total = np.array([sum(c.elements) for c in cats], dtype=float)

    def at(parallel: float) -> tuple[float, np.ndarray]:
        elements = np.maximum(largest, total / parallel)
        element_bound = np.stack([np.ones_like(y), elements, elements * dims, np.zeros_like(y)], 1)
        bytes_bound = np.stack([np.ones_like(y), np.zeros_like(y), np.zeros_like(y), streamed], 1)
        t0, a, b, _ = _wnnls(element_bound, y)
        closeness = streamed / np.maximum(elements * (a + b * dims), 1e-9)
        best = (math.inf, np.zeros(4))
        for n_bytes_bound in range(len(y) + 1):
            bound = np.zeros(len(y), dtype=bool)
            bound[np.argsort(-closeness, kind="stable")[:n_bytes_bound]] = True
            coef = _wnnls(np.where(bound[:, None], bytes_bound, element_bound), y)
            pred = coef[0] + np.maximum(elements * (coef[1] + coef[2] * dims), streamed * coef[3])
            loss = float(np.sum((pred / y - 1) ** 2))
            if loss < best[0] - 1e-12:
                best = (loss, coef)
        return best

    parallel = _argmin_log(lambda v: at(v)[0], 1.0, 4.0)
    t0, elem_ns, dim_elem_ns, inv_eff = at(parallel)[1]
    return {"t0_ns": max(t0, 300.0), "elem_ns": elem_ns, "dim_elem_ns": dim_elem_ns, "parallel_inputs": parallel,
            "bw_eff": min(1.0, 1.0 / inv_eff) if inv_eff > 0 else 1.0, "points": len(pts)}


RANGE_CHECK_KERNEL = re.compile(r"MinNanFunctor|MaxNanFunctor|compare_scalar|_assert_async")
"""The kernels of index_put_'s range check (Note [index_put_'s two kernels]): min and max reductions of the indices,
their comparisons with the bounds, the device-side asserts."""
SCATTER_KERNEL = "indexing_backward_kernel"
"""The kernel that adds the sorted rows (Note [index_put_'s two kernels])."""


def fit_index_put(pts: list[Obs]) -> dict:
    """index_put_ without accumulation (Note [index_put_'s two kernels] in models/compute.py): t0 and the time per
    element written, by least squares on relative error."""
    X = np.array([[1.0, index_put(o.op).elements] for o in pts])
    t0, elem_ns = _wnnls(X, np.array([o.kernel_ns for o in pts], dtype=float))
    return {"t0_ns": max(t0, 300.0), "elem_ns": elem_ns, "kernels": int(statistics.median(o.n_kernels for o in pts)),
            "points": len(pts)}


def fit_index_put_accumulate(pts: list[Obs]) -> dict:
    """index_put_ with accumulation (Note [index_put_'s two kernels] in models/compute.py), from the calls whose
    kernels were timed one by one: the range check's time (the median of its kernels'), the sort's fixed time and time
    per index (the kernels that are neither the check nor the scatter), and the scatter's time per warp step, the last
    two by least squares on relative error."""
    parts = [_index_put_parts(o) for o in pts if o.kernel_ns_by_name]
    if not parts:
        raise ValueError("index_put_ with accumulation: no call whose kernels were timed one by one")
    checked = [check for *_, check, _ in parts if check > 0]
    sort_t0, index_ns = _wnnls(np.array([[1.0, ip.indices] for ip, *_ in parts]),
                               np.array([s for _, s, _, _, _ in parts]))
    scatter_t0, step_ns = _wnnls(np.array([[1.0, ip.warp_steps] for ip, *_ in parts]),
                                 np.array([s for _, _, s, _, _ in parts]))
    kernels = statistics.median(n - (INDEX_PUT_RANGE_CHECK_KERNELS if check > 0 else 0) for *_, check, n in parts)
    return {"t0_ns": sort_t0 + scatter_t0, "index_ns": index_ns, "step_ns": step_ns,
            "range_check_ns": statistics.median(checked) if checked else 0.0, "kernels": int(kernels),
            "points": len(parts)}


def _index_put_parts(o: Obs) -> tuple[IndexPut, float, float, float, int]:
    """(the call, its sort's kernel ns, its scatter's, its range check's, its kernels)."""
    times = o.kernel_ns_by_name or {}
    check = sum(ns for name, ns in times.items() if RANGE_CHECK_KERNEL.search(name))
    scatter = sum(ns for name, ns in times.items() if SCATTER_KERNEL in name)
    return index_put(o.op), sum(times.values()) - check - scatter, scatter, check, o.n_kernels


def _tiles_and_reread(op, bw: float) -> tuple[int, float]:
    g = norm_weight_grad(op, GPU.sm_count)
    return (0, 0.0) if g is None else (g.serial_tiles, g.reread_bytes / bw * 1e9)


def _argmin_log(f, lo: float, hi: float, grid: int = 60, iters: int = 40) -> float:
    """The minimum of f over [lo, hi]: the best of a geometric grid, then golden section between its neighbours."""
    xs = np.geomspace(lo, hi, grid)
    i = int(np.argmin([f(x) for x in xs]))
    a, b = math.log(xs[max(i - 1, 0)]), math.log(xs[min(i + 1, grid - 1)])
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(math.exp(d))
    return math.exp((a + b) / 2)


def _nbytes(t) -> int:
    from phantora.models.compute import unique_bytes
    return unique_bytes(t)


def _fit_linear(pts: list[Obs], bw: float) -> dict:
    x = np.array([default_bytes(o.op) for o in pts], dtype=float)
    y = np.array([o.kernel_ns for o in pts], dtype=float)
    t0, inv = _wnnls(np.stack([np.ones_like(x), x / bw * 1e9], 1), y)
    return {"t0_ns": max(t0, 300.0), "bw_eff": min(2.0, 1.0 / max(inv, 0.05)),
            "kernels": int(statistics.median(o.n_kernels for o in pts)), "points": len(pts)}


# ----------------------------------------------------------------------------- foreach


def fit_foreach(cal: dict, obs: list[Obs]) -> None:
    m = model_for(cal)
    groups: dict[str, list] = defaultdict(list)
    for o in obs:
        if classify(o.op.name) == "foreach" and o.kernel_ns > 0:
            groups["default"].append(o)
            p = packet_name(o.op.name)
            if p == "aten._foreach_norm" or p in FUSED_OPTIMIZER_OPS:
                groups[p].append(o)
    bw = GPU.memory_bandwidth_bytes_per_s
    for key, pts in groups.items():
        if key == "default":
            pts = [o for o in pts if packet_name(o.op.name) != "aten._foreach_norm" and packet_name(o.op.name) not in FUSED_OPTIMIZER_OPS]
        feats = [m._foreach_features(o.op) for o in pts]
        X = np.array([[L, b / bw * 1e9] for b, L in feats], dtype=float)
        y = np.array([o.kernel_ns for o in pts], dtype=float)
        launch_ns, inv = _wnnls(X, y)
        cal["foreach"][key] = {"launch_ns": launch_ns, "bw_eff": 1.0 / max(inv, 0.05), "points": len(pts)}


# ----------------------------------------------------------------------------- kernel gap


def fit_gap() -> float:
    """10th percentile of the gaps between consecutive kernels of the profiled training steps: the
    spacing of back-to-back kernels when the GPU has a queue (the 90% above it are CPU-bound gaps
    of the profiled run)."""
    import gzip
    gaps = []
    for path in sorted(dataset.KERNELS.glob(dataset.IN_STEP_GLOB)):
        with gzip.open(path, "rt") as f:
            f.readline()
            per_step: dict[str, list] = defaultdict(list)
            for line in f:
                r = json.loads(line)
                for k in r.get("k", []):
                    per_step[r["ctx"]].append((k[1], k[2]))
        for ks in per_step.values():
            ks.sort()
            gaps += [ks[i + 1][0] - (ks[i][0] + ks[i][1]) for i in range(len(ks) - 1)]
    gaps.sort()
    return float(gaps[len(gaps) // 10]) if gaps else 1000.0


def fit_calibration(obs: list[Obs], gap_ns: float | None = None) -> dict:
    cal = base_calibration()
    fit_gemm(cal, obs)
    fit_attention(cal, obs)
    fit_memory(cal, obs)
    fit_foreach(cal, obs)
    cal["kernel_gap_ns"] = fit_gap() if gap_ns is None else gap_ns
    return cal


def measured_on() -> str:
    """The machine and versions of the GPU's in-step measurements (their meta.json)."""
    for meta_path in sorted(dataset.KERNELS.glob("in_step/*/meta.json")):
        meta = json.loads(meta_path.read_text())
        versions = meta.get("versions", {})
        return f"{GPU.name}, torch {versions.get('torch', '?')}, CUDA {versions.get('cuda', '?')}"
    return GPU.name


def build_database(obs: list[Obs]) -> KernelDatabase:
    db = KernelDatabase(GPU.key, meta={"measured_on": measured_on(),
                                       "source": f"benchmarks/kernels/fit.py from {relative(dataset.KERNELS)}"})
    for o in obs:
        db.add(o.op, DbEntry(int(round(o.kernel_ns)), o.n_kernels, o.count, o.origin, o.op.name))
    return db


def _round(v):
    if isinstance(v, float):
        return float(f"{v:.6g}")
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_round(x) for x in v]
    return v


def refit_terms(path: Path, terms: tuple[str, ...]) -> None:
    """Refit the term groups `terms` into the calibration file at `path` on the observations the whole fit reads, the
    rest of the file untouched."""
    cal = json.loads(path.read_text())
    before = json.loads(json.dumps(cal["memory"]))
    obs = load_observations()
    obs += in_step_observations(obs)[0]
    fit_terms(cal["memory"], memory_groups(obs), terms)
    cal["memory"] = _round(cal["memory"])
    path.write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    moved = {k: v for k, v in cal["memory"].items() if before.get(k) != v}
    print(f"{', '.join(terms)} -> {path}:", json.dumps(moved, indent=1, sort_keys=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default=dataset.GPU, help="the GPU whose data/<gpu>/kernels/ is fitted")
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    p.add_argument("--only", default="", help=f"comma-separated term groups ({', '.join(TERMS)}): refit only these "
                   "into the calibration.json there, leaving its other fields and the database as they are")
    args = p.parse_args()
    only = tuple(filter(None, args.only.split(",")))
    if set(only) - set(TERMS):
        p.error(f"unknown term group(s) {', '.join(sorted(set(only) - set(TERMS)))}; they are {', '.join(TERMS)}")
    use_gpu(args.gpu)
    out_dir = args.specs / args.gpu
    if only:
        refit_terms(out_dir / "calibration.json", only)
        return
    obs = load_observations()
    converted, factors = in_step_observations(obs)
    obs += converted
    out_dir.mkdir(parents=True, exist_ok=True)
    db = build_database(obs)
    db.save(out_dir / "kernels.jsonl")
    cal = _round(fit_calibration(obs))
    cal["note"] = f"Generated by benchmarks/kernels/fit.py from {relative(dataset.KERNELS)}; do not edit by hand."
    (out_dir / "calibration.json").write_text(json.dumps(cal, indent=1, sort_keys=True) + "\n")
    print(f"{len(obs)} observations ({len(converted)} microbenchmarks converted to in-step time), "
          f"{len(db)} database entries -> {out_dir}")
    print("in-step / microbenchmark factors:", {f"{g}/{s}": round(f, 3) for (g, s), f in sorted(factors.items())})
    print(json.dumps({k: cal[k] for k in ("kernel_gap_ns", "gemm")}, indent=1))


if __name__ == "__main__":
    main()
