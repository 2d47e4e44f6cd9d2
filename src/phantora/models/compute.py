"""Compute cost model: how long one intercepted aten op keeps the GPU busy.

Sources, in order (see docs/models/compute.md):

1. **Measured database** (`KernelDatabase`): kernel times measured on a real GPU for an exact op
   signature (op name, every tensor's shape/dtype/stride/device, the non-tensor arguments that
   change the kernel; float values are ignored — an optimizer's learning rate does not change a
   kernel). A second, looser key drops strides (keeps only "contiguous or not") and is tried next.
2. **Calibrated analytic model** per kernel class: roofline terms with efficiencies fitted to one
   reference GPU's measurements (`Calibration`: specs/<gpu>/calibration.json, written by
   benchmarks/kernels/fit.py on data/<gpu>/kernels/), applied with the simulated GPU's own peak
   FLOP/s, HBM bandwidth and SM count. A GPU without its own calibration borrows one (its profile says so).
3. **Generic** memory-bound estimate (bytes read + written at the calibrated "generic" bandwidth)
   for ops with no specific model; `source="generic"` so the runtime can count and list them.

Every estimate's duration is the sum of the op's kernel times plus `kernel_gap_ns` per kernel:
the minimum gap the GPU leaves between back-to-back kernels of one stream (about 1.1 µs on the H200
inside training steps), so a GPU-bound timeline built from these durations matches the real step.
Durations are integer nanoseconds, rounded (never truncated). Pure: the GPU's profile
(`phantora.specs`) reads the files and hands the database and calibration in.

Note: [GPU variants]
A variant (models/gpu.py `GpuVariant`: another memory bandwidth, clock, memory size or power limit on the same
silicon) has no measurements of its own: its kernel database is its base GPU's. A measured time t_meas is
carried over by the analytic model's ratio, t = t_meas x analytic(op on the variant) / analytic(op on the base),
kernel gaps excluded (launch spacing does not change). The analytic model is a roofline (fixed cost + max(FLOPs /
achieved peak, bytes / achieved bandwidth)), so a memory-bound op scales with the HBM bandwidth, a compute-bound
one with the clock (peak FLOP/s), an op dominated by its fixed cost hardly at all, and an op near the ridge
moves to whichever bound the variant makes binding; a variant with the base's numbers gets the measured times
bit for bit. Limits: the base's fitted efficiencies are assumed to hold at the new bandwidth and clock (a
kernel tuned to one balance of the two may pick another tile on the other); the L2 size and SM count are the
base's; a clock above the base's assumes the power and thermal headroom to hold it (the power model still caps
it at the variant's limit).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import torch
from torch.utils.flop_counter import flop_registry

from phantora.models.gpu import GpuSpec
from phantora.models.opcall import loose_signature, loosen, signature
from phantora.models.ops import (KernelClass, KernelEstimate, OpCall, TensorMeta, contiguous_strides, is_contiguous,
                                 tensors_in)

DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "uint16": 2, "uint32": 4, "uint64": 8,
}

DATABASE_FORMAT = "phantora-kernels"
DATABASE_VERSION = 1


# ----------------------------------------------------------------------------- tensor helpers


def itemsize(t: TensorMeta) -> int:
    return DTYPE_BYTES.get(t.dtype, 4)


def unique_bytes(t: TensorMeta) -> int:
    """Bytes of distinct memory a tensor covers (broadcast dims with stride 0 count once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride):
        if size == 0:
            return 0
        if stride != 0:
            n *= size
    return n * itemsize(t)


def _dense_order(t: TensorMeta) -> tuple[int, ...] | None:
    """Dim order (outermost first) of a tensor whose non-broadcast elements are packed without
    gaps; None if it has gaps (e.g. x[..., ::2])."""
    dims = [(st, i, sz) for i, (sz, st) in enumerate(zip(t.shape, t.stride)) if sz > 1 and st != 0]
    dims.sort(key=lambda d: (-d[0], d[1]))
    expected = 1
    for st, _, sz in reversed(dims):
        if st != expected:
            return None
        expected *= sz
    return tuple(i for _, i, _ in dims)


def strided_access(tensors: Iterable[TensorMeta]) -> bool:
    """True when a pointwise kernel over these tensors cannot stream them linearly: one has gaps,
    or dense operands of the same shape are laid out in different dim orders (a transpose)."""
    orders = {}
    for t in tensors:
        o = _dense_order(t)
        if o is None:
            return True
        if t.numel > 1 and all(st != 0 for sz, st in zip(t.shape, t.stride) if sz > 1):
            orders.setdefault(t.shape, set()).add(o)
    return any(len(v) > 1 for v in orders.values())


# Note [Pointwise kernel paths]
# TensorIterator runs a pointwise op on one of three CUDA kernels, and their speed differs by up to
# 4x for the same bytes (H200, in-step kernels of the llama steps in data/h200/kernels/in_step, bandwidth as a
# fraction of 4.8 TB/s): `vectorized_elementwise_kernel` when every operand is contiguous and of
# the kernel's dtype (0.85-0.92); `unrolled_elementwise_kernel` when they are contiguous but some
# must be cast (0.56 for float32 + bfloat16); `elementwise_kernel` with an offset calculator when
# any operand is broadcast (stride 0, fewer elements) or strided (0.45-0.54), and with casting on
# top (0.21-0.25: RoPE's bfloat16 `x[..., ::2]` times a float32 table). The analytic model picks
# the memory kind the same way: `<class>_strided` (gaps, transposes or a broadcast input),
# `<class>_cast` (mixed dtypes), `<class>_strided_cast`, each fitted on its own; the per-op fits
# (`aten.mul`, ...) are for the vectorized path only. Before this, a broadcast `x * rsqrt(...)`
# or the RoPE products were costed as vectorized, 1.5-2x too fast, and a 1.5B Llama step with
# recomputed activations came out 10 % short (docs/accuracy.md).


def broadcast_input(op: OpCall) -> bool:
    """True when a pointwise op reads a CUDA input broadcast against its output: a dim of size > 1
    with stride 0 (an expanded view), or fewer elements than the output (`x * w` with `w` of shape
    `[dim]`, a 0-dim CUDA tensor). PyTorch's TensorIterator vectorizes only when every operand is
    contiguous; a broadcast operand sends the op to `elementwise_kernel` with an offset calculator,
    about half the bandwidth of `vectorized_elementwise_kernel` on an H200 (Note [Pointwise kernel
    paths]). CPU scalars are passed to the kernel as arguments and do not count."""
    n_out = max((t.numel for t in op.outputs), default=0)
    for t in op.tensor_inputs():
        if not t.device.startswith("cuda"):
            continue
        if t.numel < n_out or any(sz > 1 and st == 0 for sz, st in zip(t.shape, t.stride)):
            return True
    return False


def mixed_dtypes(op: OpCall) -> bool:
    """True when a pointwise op's tensor operands of more than one element have different dtypes
    (bool masks and results aside): the kernel casts every element it loads or stores
    (`unrolled_elementwise_kernel`, or the casting `elementwise_kernel` when an operand is strided
    too), e.g. a bfloat16 activation times a float32 rotary table, or a float32 residual plus a
    bfloat16 projection under autocast."""
    dtypes = {t.dtype for t in list(op.tensor_inputs()) + list(op.outputs) if t.numel > 1 and t.dtype != "bool"}
    return len(dtypes) > 1


def writes_strided_slices(op: OpCall) -> bool:
    """True for copy-class ops whose kernel writes into a strided part of the output although the
    op's own tensors are contiguous: `stack` along an inner dim (each input is copied into every
    other slot of the result: RoPE's `torch.stack([re, im], -1)`) and `slice_backward` /
    `select_backward` of an inner dim (zeros, then a copy into the slice)."""
    p = packet_name(op.name)
    if p not in ("aten.stack", "aten.slice_backward", "aten.select_backward"):
        return False
    b = bind(op)
    if p == "aten.stack":
        ins = op.tensor_inputs()
        if not ins:
            return False
        shape = ins[0].shape
        d = int(b.get("dim", 0) or 0) % (len(shape) + 1)
        return math.prod(shape[:d]) > 1
    sizes = b.get("input_sizes") or ()
    d = int(b.get("dim", 0) or 0) % max(len(sizes), 1)
    return math.prod(sizes[:d]) > 1 or (p == "aten.slice_backward" and b.get("step", 1) not in (1, None))


def packet_name(name: str) -> str:
    """"aten._foreach_mul_.Scalar" -> "aten._foreach_mul_"."""
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name


# ----------------------------------------------------------------------------- database


@dataclass(frozen=True, slots=True)
class DbEntry:
    """Measured kernel time of one op signature."""

    kernel_ns: int
    """Median over measurements of the sum of the op's kernel durations (CUPTI), no gaps."""
    n_kernels: int
    """Kernels (and memsets/memcpys) the op launched."""
    count: int
    """How many measurements the median is over."""
    origin: str
    """Where measured: "llama_step" (inside a real training step), "micro_cold", "micro_hot", or
    "micro_in_step" (both microbenchmarks, converted to the step's time: benchmarks/kernels/dataset.py)."""
    op: str = ""
    kernels: tuple[str, ...] = ()
    """Names of the kernels the op launched, where the measurement saw them (`phantora profile`'s profiler
    timer): for a GEMM, the kernel cuBLAS picked (models/gemm_kernels.py)."""

    def record(self) -> dict:
        """The entry as a database line's fields (beside its "sig")."""
        fields = {"op": self.op, "kernel_ns": self.kernel_ns, "n_kernels": self.n_kernels, "count": self.count,
                  "origin": self.origin}
        return {**fields, "kernels": list(self.kernels)} if self.kernels else fields

    @classmethod
    def from_record(cls, r: dict) -> "DbEntry":
        return cls(int(r["kernel_ns"]), int(r["n_kernels"]), int(r["count"]), str(r["origin"]), str(r.get("op", "")),
                   tuple(str(k) for k in r.get("kernels", ())))


ORIGIN_PRIORITY = {"llama_step": 4, "run": 4, "micro_in_step": 3, "micro_hot": 2, "micro_cold": 1}


class KernelDatabase:
    """Measured kernel times keyed by op signature, for one GPU model.

    File format (JSON lines): a header `{"format": "phantora-kernels", "version": 1, "gpu": ...}`,
    then one object per signature: `{"sig", "op", "kernel_ns", "n_kernels", "count", "origin"}`. Files merge (`merge`): for a signature in both, the entry measured in the more
    realistic setting wins (in a training step > microbenchmarks converted to it > hot microbenchmark >
    cold), then the larger count.
    """

    def __init__(self, gpu: str, entries: dict[str, DbEntry] | None = None, meta: dict | None = None):
        self.gpu = gpu
        self.entries: dict[str, DbEntry] = dict(entries or {})
        self.meta = dict(meta or {})
        self._loose: dict[str, DbEntry] | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, op: OpCall) -> bool:
        return signature(op) in self.entries

    def add(self, op: OpCall, entry: DbEntry) -> None:
        self._put(signature(op), entry)

    def _put(self, sig: str, entry: DbEntry) -> None:
        old = self.entries.get(sig)
        if old is None or _better(entry, old):
            self.entries[sig] = entry
            self._loose = None

    def lookup(self, op: OpCall) -> tuple[DbEntry, str] | None:
        """(entry, "exact" | "loose") for a measured op, else None."""
        e = self.entries.get(signature(op))
        if e is not None:
            return e, "exact"
        if self._loose is None:
            self._loose = {}
            for sig, entry in self.entries.items():
                key = loosen(sig)
                cur = self._loose.get(key)
                if cur is None or _better(entry, cur):
                    self._loose[key] = entry
        e = self._loose.get(loose_signature(op))
        return (e, "loose") if e is not None else None

    def merge(self, other: "KernelDatabase") -> "KernelDatabase":
        if other.gpu != self.gpu:
            raise ValueError(f"cannot merge a {other.gpu} kernel database into a {self.gpu} one")
        out = KernelDatabase(self.gpu, self.entries, {**other.meta, **self.meta})
        for sig, e in other.entries.items():
            out._put(sig, e)
        return out

    def save(self, path: str | Path) -> None:
        with open(path, "w") as f:
            f.write(json.dumps({"format": DATABASE_FORMAT, "version": DATABASE_VERSION, "gpu": self.gpu, **self.meta}) + "\n")
            for sig in sorted(self.entries):
                f.write(json.dumps({"sig": sig, **self.entries[sig].record()}, separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "KernelDatabase":
        with open(path) as f:
            return cls.parse(f.read().splitlines(), str(path))

    @classmethod
    def parse(cls, lines: list[str], where: str) -> "KernelDatabase":
        """The database in `lines` (a file's lines; `where` names the file in errors)."""
        if not lines:
            raise ValueError(f"{where}: empty kernel database")
        head = json.loads(lines[0])
        if head.get("format") != DATABASE_FORMAT:
            raise ValueError(f"{where}: not a Phantora kernel database (format {head.get('format')!r})")
        if head.get("version") != DATABASE_VERSION:
            raise ValueError(f"{where}: kernel database version {head.get('version')} (this Phantora reads {DATABASE_VERSION})")
        db = cls(head["gpu"], meta={k: v for k, v in head.items() if k not in ("format", "version", "gpu")})
        for line in lines[1:]:
            if not line.strip():
                continue
            r = json.loads(line)
            db._put(r["sig"], DbEntry.from_record(r))
        return db


def _better(a: DbEntry, b: DbEntry) -> bool:
    pa, pb = ORIGIN_PRIORITY.get(a.origin, 0), ORIGIN_PRIORITY.get(b.origin, 0)
    return (pa, a.count) > (pb, b.count)


# ----------------------------------------------------------------------------- calibration


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted constants of the analytic model, from one reference GPU (`reference_gpu`)."""

    reference_gpu: str
    kernel_gap_ns: float
    gemm: dict[str, Any]
    attention: dict[str, Any]
    memory: dict[str, dict[str, float]]
    """Per memory-bound kernel kind: {"t0_ns": fixed time, "bw_eff": fraction of HBM bandwidth}."""
    foreach: dict[str, dict[str, float]]
    """Per foreach op (or "default"): {"launch_ns": time per multi_tensor_apply launch, "bw_eff"}."""
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        return cls(reference_gpu=d["reference_gpu"], kernel_gap_ns=float(d["kernel_gap_ns"]), gemm=d["gemm"],
                   attention=d["attention"], memory=d["memory"], foreach=d["foreach"], raw=d)


# ----------------------------------------------------------------------------- op classes

GEMM_OPS = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.addbmm", "aten.mv", "aten.addmv", "aten.dot"}
GROUPED_GEMM_OPS = {"aten._grouped_mm", "aten._scaled_grouped_mm"}
"""Grouped GEMMs (a mixture-of-experts layer's experts in one kernel: CUTLASS on sm90, not cuBLAS): Note
[Grouped GEMMs]."""
ATTENTION_OPS = {
    "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_flash_attention_backward",
    "aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_cudnn_attention_backward",
    "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_efficient_attention_backward",
    "aten._flash_attention_forward", "aten._flash_attention_backward",
    "aten._efficient_attention_forward", "aten._efficient_attention_backward",
}
CAST_COPY_OPS = {"aten._to_copy", "aten.copy_", "aten.clone", "aten._copy_from", "aten._copy_from_and_resize", "aten.to"}
COPY_OPS = {
    "aten.cat", "aten.stack", "aten.slice_backward", "aten.select_backward", "aten.narrow_copy", "aten.repeat",
    "aten.expand_copy", "aten.constant_pad_nd", "aten.flip", "aten.roll", "aten.split_with_sizes_copy",
    "aten.unbind_copy", "aten.split_copy", "aten.diagonal_backward", "aten.as_strided_scatter", "aten.slice_scatter",
    "aten.select_scatter", "aten.index_copy", "aten.index_copy_", "aten.tril", "aten.triu", "aten.tril_", "aten.triu_",
    "aten.unfold_backward", "aten.view_copy", "aten.permute_copy", "aten.transpose_copy", "aten.t_copy", "aten.detach_copy",
    "aten.alias_copy", "aten.unsqueeze_copy", "aten.squeeze_copy", "aten.lift_fresh_copy", "aten.new_empty_strided",
}
MEMSET_OPS = {"aten.fill_", "aten.zero_", "aten.zeros", "aten.ones", "aten.full", "aten.zeros_like", "aten.ones_like",
              "aten.full_like", "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.fill", "aten.scalar_tensor",
              "aten.arange", "aten.linspace", "aten.eye"}
RANDOM_OPS = {"aten.normal_", "aten.uniform_", "aten.random_", "aten.bernoulli_", "aten.bernoulli", "aten.exponential_",
              "aten.randn", "aten.rand", "aten.randint", "aten.randn_like", "aten.rand_like", "aten.randint_like",
              "aten.randperm", "aten.native_dropout", "aten.normal", "aten.multinomial", "aten.log_normal_",
              "aten.geometric_", "aten.cauchy_"}
REDUCTION_OPS = {"aten.sum", "aten.mean", "aten.amax", "aten.amin", "aten.max", "aten.min", "aten.prod", "aten.var",
                 "aten.std", "aten.var_mean", "aten.std_mean", "aten.norm", "aten.linalg_vector_norm", "aten.argmax",
                 "aten.argmin", "aten.any", "aten.all", "aten.logsumexp", "aten.cumsum", "aten.cumprod", "aten.count_nonzero",
                 "aten.aminmax", "aten.nansum", "aten._linalg_vector_norm"}
NORM_OPS = {"aten.native_layer_norm", "aten.native_layer_norm_backward", "aten._fused_rms_norm", "aten._fused_rms_norm_backward",
            "aten.native_group_norm", "aten.native_group_norm_backward", "aten.native_batch_norm",
            "aten.native_batch_norm_backward", "aten._native_batch_norm_legit", "aten._native_batch_norm_legit_functional",
            "aten._softmax", "aten._softmax_backward_data", "aten._safe_softmax", "aten.cudnn_batch_norm",
            "aten.cudnn_batch_norm_backward", "aten._batch_norm_with_update", "aten.batch_norm_backward"}
NORM_BACKWARD_OPS = {"aten.native_layer_norm_backward", "aten._fused_rms_norm_backward"}
"""Norm backwards whose weight gradient is a column reduction of limited parallelism: Note [Norm backward's weight
gradient]."""
NORM_FORWARD_OPS = {"aten.native_layer_norm", "aten._fused_rms_norm"}
"""Norm forwards that run one block per row: Note [Norms pay per row]."""
INDEX_PUT_OPS = {"aten.index_put_", "aten.index_put", "aten._index_put_impl_"}
"""Writes through integer indices: Note [index_put_'s two kernels]."""
LOSS_OPS = {"aten._log_softmax", "aten._log_softmax_backward_data", "aten.nll_loss_forward", "aten.nll_loss_backward",
            "aten.nll_loss2d_forward", "aten.nll_loss2d_backward", "aten.mse_loss", "aten.mse_loss_backward",
            "aten.binary_cross_entropy_with_logits", "aten.smooth_l1_loss", "aten.smooth_l1_loss_backward",
            "aten.binary_cross_entropy", "aten.binary_cross_entropy_backward", "aten.huber_loss", "aten.huber_loss_backward"}
EMBEDDING_OPS = {"aten.embedding", "aten.embedding_dense_backward", "aten._embedding_bag", "aten._embedding_bag_backward",
                 "aten.embedding_renorm_"}
INDEX_OPS = {"aten.index_select", "aten.gather", "aten.scatter", "aten.scatter_", "aten.scatter_add", "aten.scatter_add_",
             "aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_", "aten.index_add", "aten.index_add_",
             "aten.masked_scatter", "aten.masked_scatter_", "aten.gather_backward", "aten.index_fill", "aten.index_fill_",
             "aten.take", "aten.put_", "aten.scatter_reduce", "aten.scatter_reduce_", "aten.sort", "aten.topk",
             "aten.argsort", "aten.masked_select", "aten.nonzero", "aten.unique", "aten._unique2", "aten.bincount",
             "aten.searchsorted", "aten.histc", "aten.kthvalue", "aten.median"}
ELEMENTWISE_OPS = {
    "aten.add", "aten.add_", "aten.sub", "aten.sub_", "aten.mul", "aten.mul_", "aten.div", "aten.div_", "aten.neg",
    "aten.neg_", "aten.reciprocal", "aten.reciprocal_", "aten.rsqrt", "aten.rsqrt_", "aten.sqrt", "aten.sqrt_",
    "aten.exp", "aten.exp_", "aten.exp2", "aten.expm1", "aten.log", "aten.log_", "aten.log2", "aten.log1p", "aten.log10",
    "aten.pow", "aten.pow_", "aten.abs", "aten.abs_", "aten.sign", "aten.sgn", "aten.sin", "aten.cos", "aten.tan",
    "aten.tanh", "aten.tanh_", "aten.sigmoid", "aten.sigmoid_", "aten.silu", "aten.silu_", "aten.gelu", "aten.gelu_",
    "aten.relu", "aten.relu_", "aten.leaky_relu", "aten.elu", "aten.mish", "aten.hardswish", "aten.hardsigmoid",
    "aten.softplus", "aten.erf", "aten.erfinv", "aten.floor", "aten.ceil", "aten.round", "aten.trunc", "aten.frac",
    "aten.clamp", "aten.clamp_", "aten.clamp_min", "aten.clamp_min_", "aten.clamp_max", "aten.clamp_max_", "aten.clip",
    "aten.where", "aten.masked_fill", "aten.masked_fill_", "aten.lerp", "aten.lerp_", "aten.addcmul", "aten.addcmul_",
    "aten.addcdiv", "aten.addcdiv_", "aten.maximum", "aten.minimum", "aten.fmax", "aten.fmin", "aten.remainder",
    "aten.fmod", "aten.floor_divide", "aten.eq", "aten.ne", "aten.lt", "aten.le", "aten.gt", "aten.ge", "aten.logical_and",
    "aten.logical_or", "aten.logical_not", "aten.logical_xor", "aten.bitwise_and", "aten.bitwise_or", "aten.bitwise_not",
    "aten.bitwise_xor", "aten.__and__", "aten.__or__", "aten.__xor__", "aten.__iand__", "aten.__ior__", "aten.__ixor__",
    "aten.isnan", "aten.isinf", "aten.isfinite", "aten.nan_to_num", "aten.nan_to_num_",
    "aten.silu_backward", "aten.gelu_backward", "aten.threshold_backward", "aten.sigmoid_backward", "aten.tanh_backward",
    "aten.hardswish_backward", "aten.leaky_relu_backward", "aten.elu_backward", "aten.softplus_backward",
    "aten.mish_backward", "aten.native_dropout_backward", "aten.hardtanh", "aten.hardtanh_backward", "aten.atan2",
    "aten.log_sigmoid", "aten.log_sigmoid_forward", "aten.log_sigmoid_backward", "aten.square", "aten.xlogy", "aten.logit", "aten.heaviside", "aten.copysign", "aten.lgamma", "aten.digamma",
    "aten.polar", "aten.complex", "aten.view_as_real", "aten.glu", "aten.glu_backward", "aten.rsub", "aten.true_divide",
    "aten._amp_foreach_non_finite_check_and_unscale_", "aten._amp_update_scale_", "aten.erfc", "aten.sinh", "aten.cosh",
    "aten.asin", "aten.acos", "aten.atan", "aten.mvlgamma", "aten.sign_", "aten.logical_not_",
}
FREE_OPS = {"aten._local_scalar_dense", "aten.empty", "aten.empty_strided", "aten.empty_like", "aten.lift_fresh",
            "aten.resize_", "aten.set_", "aten.record_stream", "profiler._record_function_enter_new",
            "profiler._record_function_exit", "aten._assert_async", "aten.sym_size", "aten.sym_stride", "prim.device",
            "aten.is_same_size", "aten._nested_tensor_from_mask_left_aligned", "aten.item",
            # views and metadata ops launch no kernel (the runtime normally filters them out)
            "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.expand", "aten.slice", "aten.select",
            "aten.unsqueeze", "aten.squeeze", "aten.detach", "aten.alias", "aten.as_strided", "aten.permute",
            "aten.split", "aten.split_with_sizes", "aten.unbind", "aten.narrow", "aten.diagonal", "aten.unfold",
            "aten._reshape_alias", "aten.view_as_real", "aten.view_as_complex", "aten._conj", "aten._neg_view",
            "aten.unsafe_split", "aten.chunk", "aten.movedim", "aten.expand_as", "aten.view_as"}

FUSED_OPTIMIZER_OPS = {"aten._fused_adam_", "aten._fused_adamw_", "aten._fused_sgd_", "aten._fused_adagrad_",
                       "aten._fused_adam", "aten._fused_adamw", "aten._fused_sgd", "aten._fused_adagrad"}
OVERWRITE_OPS = {"aten.copy_", "aten.fill_", "aten.zero_", "aten.normal_", "aten.uniform_", "aten.random_",
                 "aten.bernoulli_", "aten.exponential_", "aten.log_normal_", "aten.geometric_", "aten.cauchy_"}
"""In-place ops that overwrite `self` without reading it."""

GENERATED_KERNELS: dict[str, KernelClass] = {"inductor.pointwise": "elementwise", "inductor.reduction": "reduction"}
"""Kernels TorchInductor generates for a compiled graph (runtime/inductor.py Note [Simulated Inductor]): each
reads and writes the buffers its OpCall lists, once (fused intermediates are not among them), and is costed as
the memory-bound kernel of its class; the calibrated efficiencies are those of PyTorch's own CUDA kernels of
that class, borrowed for Triton's (not yet fitted on Triton kernels)."""

MEMORY_KIND_OF_CLASS: dict[str, str] = {
    "elementwise": "elementwise", "copy": "copy", "memset": "memset", "random": "random", "reduction": "reduction",
    "norm": "norm", "loss": "loss", "embedding": "embedding", "index": "index", "other": "generic",
}


def classify(name: str) -> KernelClass | None:
    """Kernel class of an op name; None for an op with no specific model."""
    p = packet_name(name)
    if p in GENERATED_KERNELS:
        return GENERATED_KERNELS[p]
    if p in GEMM_OPS or p in GROUPED_GEMM_OPS:
        return "gemm"
    if p in ATTENTION_OPS:
        return "attention"
    if p.startswith("aten._foreach_") or p in FUSED_OPTIMIZER_OPS or p == "aten._amp_foreach_non_finite_check_and_unscale_":
        return "foreach"
    if p in CAST_COPY_OPS or p in COPY_OPS or p in FSDP_COPY_ARGS:
        return "copy"
    if p in MEMSET_OPS:
        return "memset"
    if p in RANDOM_OPS:
        return "random"
    if p in REDUCTION_OPS:
        return "reduction"
    if p in NORM_OPS:
        return "norm"
    if p in LOSS_OPS:
        return "loss"
    if p in EMBEDDING_OPS:
        return "embedding"
    if p in INDEX_OPS:
        return "index"
    if p in ELEMENTWISE_OPS:
        return "elementwise"
    return None


@lru_cache(maxsize=None)
def _schema_names(name: str) -> tuple[str, ...]:
    ns, rest = name.split(".", 1)
    parts = rest.rsplit(".", 1)
    try:
        pk = getattr(getattr(torch.ops, ns), parts[0])
        ov = getattr(pk, parts[1] if len(parts) > 1 else "default")
        return tuple(a.name for a in ov._schema.arguments)
    except (AttributeError, RuntimeError):
        return ()


def bind(op: OpCall) -> dict[str, Any]:
    """Arguments by schema name (positional and keyword)."""
    names = _schema_names(op.name)
    out = {n: v for n, v in zip(names, op.args)}
    out.update(dict(op.kwargs))
    return out


def default_bytes(op: OpCall) -> float:
    """Bytes a kernel must move: tensor inputs read once, outputs written once, with rules for ops
    that read only part of an input (embedding, gathers, nll_loss) or overwrite without reading."""
    p = packet_name(op.name)
    ins = op.tensor_inputs()
    outs = sum(unique_bytes(t) for t in op.outputs)
    if p in OVERWRITE_OPS:
        src = sum(unique_bytes(t) for t in ins[1:]) if p == "aten.copy_" else 0
        return float(src + (outs or (unique_bytes(ins[0]) if ins else 0)))
    if p in MEMSET_OPS:
        return float(outs)
    if p == "fsdp.all_gather_copy_in":  # its inputs, read, then written into their slots of the buffer
        copy = all_gather_copy_in_as_foreach_copy(op)
        return float(sum(unique_bytes(t) for lst in copy.args for t in lst))
    if p in ("aten.embedding", "aten.index_select", "aten.gather", "aten.index", "aten.take") and ins:
        idx = sum(unique_bytes(t) for t in ins if t.dtype in ("int64", "int32"))
        return float(idx + 2 * outs)
    if p == "aten.embedding_dense_backward" and ins:
        return float(sum(unique_bytes(t) for t in ins) + outs)
    if p in ("aten.nll_loss_forward", "aten.nll_loss2d_forward") and len(ins) >= 2:
        target = ins[1]
        return float(unique_bytes(target) + target.numel * itemsize(ins[0]) + outs)
    if p in ("aten.nll_loss_backward", "aten.nll_loss2d_backward"):
        return float(outs + sum(unique_bytes(t) for t in ins if t.dtype in ("int64", "int32")))
    total = sum(unique_bytes(t) for t in ins) + outs
    if not op.outputs and p.endswith("_") and ins:
        total += unique_bytes(ins[0])
    return float(total)


@lru_cache(maxsize=None)
def _flop_formula(packet: str):
    ns, n = packet.split(".", 1)
    try:
        return flop_registry.get(getattr(getattr(torch.ops, ns), n))
    except AttributeError:
        return None


def _shape_tree(v: Any) -> Any:
    if isinstance(v, TensorMeta):
        return torch.Size(v.shape)
    if isinstance(v, tuple):
        return tuple(_shape_tree(x) for x in v)
    return v


def registry_flops(op: OpCall) -> float:
    """FLOPs from torch.utils.flop_counter's registry (shapes in place of tensors); 0 if no formula."""
    f = _flop_formula(packet_name(op.name))
    if f is None:
        return 0.0
    args = _shape_tree(op.args)
    kwargs = {k: _shape_tree(v) for k, v in op.kwargs}
    out = op.outputs[0].shape if len(op.outputs) == 1 else tuple(torch.Size(o.shape) for o in op.outputs)
    try:
        return float(f(*args, out_shape=out, **kwargs))
    except Exception:  # noqa: BLE001 - a formula that rejects odd arguments: fall back to our own count
        return 0.0


# ----------------------------------------------------------------------------- grouped GEMMs

# Note [Grouped GEMMs]
# `torch._grouped_mm(a, b, offs)` runs one GEMM per group (a mixture-of-experts layer's experts) in one
# kernel; `offs` holds where each group ends along the grouped dimension, values the cost model does not see.
# The forward (a: tokens x K, b: groups x K x N), the input gradient (the same with b transposed) and the
# weight gradient (a: K x tokens and b: tokens x N, grouped along the contraction, out: groups x K x N) all
# do 2 x tokens x K x N FLOPs whatever the split. The model costs them as `groups` GEMMs of the mean group
# size, batched. The kernel is not cuBLAS's: on sm90 and later PyTorch runs one CUTLASS grouped kernel
# (aten/src/ATen/native/cuda/GroupMM.cu) with a persistent grid of one CTA per SM, a fixed tile (64 x 128 where a
# group's M or N is at most 128, else 128 x 256; 64 x 128 on sm100) and no split of K. A weight gradient has few
# output tiles (DeepSeek-V3's debug model, 4 experts of 256 x 256 on a rank: 8 tiles on 132 SMs), each looping over
# all of its group's tokens: 586-592 µs measured for 65k to 137k tokens on an H200
# (data/h200/e2e/frameworks/profiles/torchtitan_deepseek_v3_debug_ep2.rank0.trace.json.gz), where cuBLAS's tile and
# split choice gave 35 µs. Uneven groups, which a real router makes, fill the tiles less well than their mean
# does: the largest group sets the weight gradient's time.

GROUPED_GEMM_TILES = {"small": (64, 128), "large": (128, 256), "sm100": (64, 128)}
"""PyTorch's CUTLASS grouped GEMM tiles (GroupMM.cu): "small" where a group's M or N is at most 128 (sm90)."""


def grouped_gemm_tile(m: int, n: int, compute_capability: tuple[int, int]) -> tuple[int, int]:
    """The (tm, tn) tile of PyTorch's grouped GEMM kernel for groups of m x n outputs (Note [Grouped GEMMs])."""
    if compute_capability[0] >= 10:
        return GROUPED_GEMM_TILES["sm100"]
    return GROUPED_GEMM_TILES["small" if m <= 128 or n <= 128 else "large"]


def grouped_gemm_dims(a: TensorMeta, b: TensorMeta, out: TensorMeta | None) -> tuple[int, int, int, int, float]:
    """(groups, m, k, n, FLOPs) of a grouped GEMM: each group of the mean size, the FLOPs exact (Note
    [Grouped GEMMs])."""
    if len(a.shape) == 3 and len(b.shape) == 3:  # batched: every group its own operands
        groups, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
        return groups, m, k, n, 2.0 * groups * m * k * n
    if len(a.shape) == 2 and len(b.shape) == 3:  # rows grouped: a is tokens x K
        groups, k, n = b.shape[0], a.shape[1], b.shape[2]
        return groups, max(1, a.shape[0] // groups), k, n, 2.0 * a.shape[0] * k * n
    if len(a.shape) == 3 and len(b.shape) == 2:  # columns grouped: b is K x (groups x N)
        groups, m, k = a.shape
        return groups, m, k, max(1, b.shape[1] // groups), 2.0 * m * k * b.shape[1]
    groups = out.shape[0] if out is not None and len(out.shape) == 3 else 1  # contraction grouped
    m, n = a.shape[0], b.shape[1]
    return groups, m, max(1, a.shape[1] // groups), n, 2.0 * m * a.shape[1] * n


# ----------------------------------------------------------------------------- FSDP2's copies

# Note [FSDP2's copy ops]
# FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) packs and unpacks its collective
# buffers with three custom ops, whose CUDA implementations are copies:
# - `fsdp.all_gather_copy_in`: `_foreach_copy_` of the sharded parameters into this rank's slots of
#   the all-gather buffer (multi_tensor_apply: several launches for a large shard);
# - `fsdp.split_with_sizes_copy`: `aten.split_with_sizes_copy.out` of the gathered buffer into the
#   unsharded parameters (one batched copy kernel);
# - `fsdp.chunk_cat`: `aten._chunk_cat.out` of the padded gradients into the reduce-scatter buffer,
#   casting them to the reduce dtype (one kernel).
# Measured database entries cover the shapes profiled; every other shape is costed as the copy its
# CUDA implementation runs: bytes read plus bytes written at the calibrated bandwidth of that kind of
# copy (the foreach model's for the first; a copy's, or a widening or narrowing cast's, for the others).
FSDP_COPY_ARGS: dict[str, tuple[str, ...]] = {
    "fsdp.all_gather_copy_in": ("all_gather_inputs", "all_gather_output", "inp_split_sizes",
                                "all_gather_input_numel", "rank"),
    "fsdp.split_with_sizes_copy": ("all_gather_output", "all_gather_input_split_sizes", "dim", "out"),
    "fsdp.chunk_cat": ("tensors", "dim", "num_chunks", "out"),
}
"""Each FSDP2 copy op's arguments, by schema name (its library is registered only once FSDP2 is imported)."""


def _fsdp_args(op: OpCall) -> dict[str, Any]:
    names = FSDP_COPY_ARGS[packet_name(op.name)]
    bound = dict(zip(names, op.args))
    bound.update(dict(op.kwargs))
    return bound


def all_gather_copy_in_as_foreach_copy(op: OpCall) -> OpCall:
    """`fsdp.all_gather_copy_in` as the `_foreach_copy_` its CUDA implementation runs: each input into a
    contiguous slot of the all-gather buffer, in the buffer's dtype."""
    args = _fsdp_args(op)
    sources = tuple(tensors_in(args["all_gather_inputs"]))
    out = args["all_gather_output"]
    slots = tuple(TensorMeta((t.numel,), out.dtype, (1,), out.device) for t in sources)
    return OpCall("aten._foreach_copy_.default", (slots, sources), (), ())


def fsdp_copy_kind(op: OpCall) -> str:
    """The memory kind of `fsdp.split_with_sizes_copy` / `fsdp.chunk_cat`: a copy, or a cast when the
    destination's dtype is wider or narrower than the source's."""
    args = _fsdp_args(op)
    source = args["all_gather_output"] if "all_gather_output" in args else args["tensors"]
    src, dst = tensors_in(source), tensors_in(args["out"])
    if not src or not dst or itemsize(src[0]) == itemsize(dst[0]):
        return "copy"
    return "cast_up" if itemsize(dst[0]) > itemsize(src[0]) else "cast_down"


# ----------------------------------------------------------------------------- norm backwards

# Note [Norm backward's weight gradient]
# LayerNorm's and RMSNorm's backward on CUDA (aten/src/ATen/native/cuda/layer_norm_kernel.cu) run two kernels: the
# input gradient, one block per row (`layer_norm_grad_input_kernel_vectorized`), and the weight (and bias)
# gradient, a reduction over the rows of each column (`GammaBetaBackwardCUDAKernelTemplate`). The second reads
# the output gradient and the input again, and its parallelism is set by the columns: a block of 32 x 32 threads
# owns 32 columns and walks down all M rows in tiles of 256 rows (fewer below 256 rows), one tile's loads in
# flight at a time. With N columns that is ceil(N/32) blocks (one 1024-thread block per SM, so ceil(N/32/SMs)
# waves), each taking ceil(M/256) tiles in turn: a hidden size of 256 gives 8 blocks on 132 SMs, and the kernel
# takes as long as 128 tiles of latency however few bytes it moves. Only above 65536 rows, and for fewer than
# SMs/2 blocks, does PyTorch split the rows over many small blocks (partial sums, then a `.sum(0)`: a third kernel),
# which parallelizes. The model: t0 + bytes / (BW·eff) + max(bytes re-read / (BW·eff), waves · tiles · tile_ns),
# with t0 and eff fitted per op and `tile_ns` (the time a block takes per tile: a memory round trip and its share
# of the loads) fitted on both ops' measurements (benchmarks/kernels/fit.py `fit_norm_backward`). The sweeps'
# hidden sizes of 1024-8192 ask 16-128 tiles of 32-256 blocks; DeepSeek-V3's debug model's 256 and 512 over
# 32768 rows took 101 and 115 µs to read 34 and 67 MB (data/h200/e2e/frameworks/profiles, held out).
NORM_TILE_ROWS = ((64, 8), (128, 64), (256, 128))
"""(rows below, rows per tile) of the weight-gradient kernel for short inputs; 256 rows per tile from 256 rows."""
NORM_BLOCK_COLS = 32
"""Columns per block of the weight-gradient kernel (CUDA's warp size)."""
NORM_PARTIAL_ROWS = 64 * 1024
"""Above this many rows (and with fewer than SMs/2 blocks), the weight gradient is split over the rows."""


@dataclass(frozen=True)
class NormWeightGrad:
    """The weight-gradient kernel of a norm backward (Note [Norm backward's weight gradient])."""

    reread_bytes: float
    """The output gradient and the input, read again."""
    serial_tiles: int
    """Tiles one block walks through, times the waves of blocks (0 where the rows are split over blocks)."""
    split_rows: bool
    """Rows split over blocks: partial sums and a third kernel that adds them."""


def norm_weight_grad(op: OpCall, sm_count: int) -> NormWeightGrad | None:
    """The weight-gradient kernel `op` (a LayerNorm or RMSNorm backward) runs; None when it computes no weight or
    bias gradient."""
    b = bind(op)
    x, mask = b.get("input"), tuple(b.get("output_mask") or ())
    if not isinstance(x, TensorMeta) or not isinstance(b.get("weight"), TensorMeta) or not any(mask[1:]):
        return None
    n = math.prod(b.get("normalized_shape") or x.shape[-1:])
    m = x.numel // max(n, 1)
    if m == 0 or n == 0:
        return None
    blocks = _ceil_div(n, NORM_BLOCK_COLS)
    reread = 2.0 * m * n * itemsize(x)
    if m > NORM_PARTIAL_ROWS and n // NORM_BLOCK_COLS < sm_count // 2:
        return NormWeightGrad(reread, 0, True)
    rows = next((r for below, r in NORM_TILE_ROWS if m < below), 256)
    return NormWeightGrad(reread, _ceil_div(m, rows) * _ceil_div(blocks, sm_count), False)


# ----------------------------------------------------------------------------- norm rows

# Note [Norms pay per row]
# LayerNorm's and RMSNorm's forward (`vectorized_layer_norm_kernel`) and the input gradient of their backward
# (`layer_norm_grad_input_kernel_vectorized`, aten/src/ATen/native/cuda/layer_norm_kernel.cu) run one thread block
# per row: it loads the row, reduces it across its warps (shared memory and a barrier), then reads the row again to
# write the result. Two terms follow.
# - A block's time is a fixed latency (the reduction's shuffles and barriers, memory round trips) plus its loads, and
#   an SM holds a fixed number of blocks, so a row costs `row_ns` (that latency over the blocks in flight) on top of
#   its bytes. Narrow rows are latency-bound: on an H200 an RMSNorm forward of 128 to 512 bfloat16 columns takes 0.64
#   to 0.87 ns a row (data/h200/kernels/micro/shape_sweeps/), where their bytes alone take 0.16 to 0.6; DeepSeek-V3's
#   debug model normalizes 32768 rows of 256 columns.
# - The second pass (over the input; the input and the output gradient in the backward) finds the row in L1 only as
#   far as L1 holds it beside the rows of the other blocks in flight: a row keeps `l1_row_bytes` of it there, and
#   the rest comes from memory once more. On the sweeps, rows whose second pass is 8 KB or more (a forward over 4096
#   bfloat16 columns, a backward over 2048) run 10-30 % slower per byte than narrower rows.
#   t = t0 + (bytes + rows · max(0, second-pass bytes per row - l1_row_bytes)) / (BW·eff) + rows · row_ns
# t0, eff and row_ns are fitted per op, `l1_row_bytes` on the forwards, whose time is their row kernel's alone
# (benchmarks/kernels/fit.py `fit_norms`; the backward's weight gradient: Note [Norm backward's weight gradient]).
# The CUDA implementations take their operands `expect_contiguous()`: a strided input (DeepSeek-V3 normalizes the
# first 512 of 576 columns) is copied first, a strided copy costed as such (42 µs beside the norm's 30 there).


def norm_rows(op: OpCall) -> int:
    """The rows a LayerNorm or RMSNorm (forward or backward) normalizes: its input's elements over the normalized
    shape's (Note [Norms pay per row])."""
    b = bind(op)
    x = b.get("input")
    if not isinstance(x, TensorMeta):
        return 0
    n = math.prod(b.get("normalized_shape") or x.shape[-1:])
    return x.numel // n if n else 0


def norm_second_pass_bytes(op: OpCall, l1_row_bytes: float) -> float:
    """The bytes a norm's row kernel reads from memory a second time: of each row's second pass (the input; the input
    and the output gradient in the backward), what is beyond the `l1_row_bytes` L1 keeps (Note [Norms pay per
    row])."""
    x = bind(op).get("input")
    rows = norm_rows(op)
    if not isinstance(x, TensorMeta) or rows == 0:
        return 0.0
    per_row = x.numel // rows * itemsize(x) * (2 if packet_name(op.name) in NORM_BACKWARD_OPS else 1)
    return rows * max(0.0, per_row - l1_row_bytes)


# ----------------------------------------------------------------------------- strided concatenation

# Note [Strided concatenation]
# `torch.cat` on CUDA (aten/src/ATen/native/cuda/Shape.cu, `cat_out_cuda`) copies its inputs in one kernel when
# there are several of them, the output has at most 4 dims, is contiguous and 32-bit indexable, and they share a
# dtype. If every input is contiguous it takes a vectorized kernel that streams bytes (the `copy` kind's model). If
# any is strided (a slice of a wider tensor) or expanded (a broadcast), every input goes through
# `CatArrayBatchedCopy`: a grid of 2 blocks of 512 threads per SM for each input (the grid's y, up to 64 inputs a
# launch), each thread copying one element at a time and computing the element's input and output offsets with a
# division per dimension. Its time is set by elements, not bytes: an H200 copies 240-250 output elements per ns of
# 4-dim bfloat16 or float32 alike (data/<gpu>/kernels/micro/shape_sweeps/), and an expanded input, which reads less,
# is no faster. The model: an element costs `elem_ns + dim_elem_ns · dims` of an input's own blocks (they are
# latency-bound: an input's 2 blocks per SM keep a fixed number of elements in flight), inputs copied at once reach
# `parallel_inputs` times one input's rate (not their number: they share the SMs' issue slots), and no faster than
# `bw_eff` of the bandwidth (one element per load and store):
#   t = t0 + max(largest input · c, all inputs · c / parallel_inputs, bytes / (BW·bw_eff))
#   c = elem_ns + dim_elem_ns · dims
# fitted on the sweep's strided and expanded cats of 2-4 dims and 8-268 M elements (benchmarks/kernels/fit.py
# `fit_cat_strided`). DeepSeek-V3's query and key concatenations, 8 x 4096 x 16 x {128, 64} and x {128, 128}, took 421
# and 534 µs where a strided copy of their bytes (`copy_strided`) gave 236 and 313. A cat that meets none of the
# batched kernel's conditions copies each input into its slice of the output (`copy_` of a `narrow`), as before.
CAT_MAX_DIMS = 4
"""The most dims `CatArrayBatchedCopy` handles (CAT_ARRAY_MAX_INPUT_DIMS)."""
CAT_INPUTS_PER_LAUNCH = 64
"""Inputs per launch of the strided kernel (CAT_ARRAY_BATCH_SIZE / 2: their strides travel in the arguments)."""
INT32_INDEXABLE = 2**31 - 1


@dataclass(frozen=True)
class StridedCat:
    """What `CatArrayBatchedCopy` does for one `aten.cat` (Note [Strided concatenation])."""

    dims: int
    """The output's dims: the kernel's index computation has a division per dim."""
    elements: tuple[int, ...]
    """Each non-empty input's elements (an expanded input counts every element it presents)."""

    @property
    def launches(self) -> int:
        return _ceil_div(len(self.elements), CAT_INPUTS_PER_LAUNCH)


def _indexable_32bit(t: TensorMeta) -> bool:
    """PyTorch's canUse32BitIndexMath: the elements and the farthest offset fit an int32."""
    farthest = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride) if n)
    return t.numel <= INT32_INDEXABLE and farthest <= INT32_INDEXABLE


def strided_cat(op: OpCall) -> StridedCat | None:
    """The batched strided copy an `aten.cat` runs, or None when it runs the vectorized kernel of contiguous inputs,
    or a copy per input (Note [Strided concatenation])."""
    if packet_name(op.name) != "aten.cat" or not op.args or not op.outputs:
        return None
    inputs = tensors_in(op.args[0])
    out = op.outputs[0]
    if (len(inputs) < 2 or len(out.shape) > CAT_MAX_DIMS or not is_contiguous(out) or len({t.dtype for t in inputs}) > 1
            or not all(_indexable_32bit(t) for t in (*inputs, out))):
        return None
    if all(is_contiguous(t) for t in inputs):
        return None
    elements = tuple(t.numel for t in inputs if t.numel > 0)
    return StridedCat(len(out.shape), elements) if elements else None


# ----------------------------------------------------------------------------- index_put_

# Note [index_put_'s two kernels]
# `x[idx] = v` and `x.index_put_((idx,), v, accumulate)` with integer indices (aten/src/ATen/native/cuda/
# Indexing.cu) run one of two kernels. Without accumulation, TensorIterator's `index_elementwise_kernel`: a thread
# per written element computes its offsets through the index and stores it, about 215 elements per ns on an H200
# (4.7 ps each) whether they are 2 or 4 bytes wide: t = t0 + elements · elem_ns. With accumulation (the backward of
# a gather: `_index_put_impl_(..., accumulate=True, unsafe=True)`), `index_put_with_sort_kernel` first sorts the
# indices (cub's radix sort: a histogram, a scan, one pass per 8 bits of key, memsets, and the linear indices'
# arithmetic: 12 launches, about 30 µs), then `indexing_backward_kernel` gives a warp to each run of equal indices
# and 128 columns, and the warp walks its run adding one row after the other, a memory round trip each: a warp step
# per index and 128 columns, `step_ns` apiece over the GPU. `index_put_` called directly (unsafe=False) also checks
# the indices' range first: two reductions and two device-side asserts (`range_check_ns`, 6 launches).
#   t = t0 + indices · index_ns + indices · before · ceil(after / 128) · step_ns [+ range_check_ns]
# where `before` and `after` are the elements of the dims before and after the indexed ones; the out-of-place
# `index_put` copies `self` first. All fitted on the sweep's calls, whose kernels the profiler times one by one
# (benchmarks/kernels/fit.py `fit_index_put`, `fit_index_put_accumulate`). Boolean masks (`x[mask] = 0`) take other
# paths and keep the index class's bytes model. Not modelled: how long the runs of equal indices are (the sweep's
# random indices, runs of 1.6 and 4, give 15 % apart for the same steps; all-distinct indices take longer), a sort of
# more than 16 key bits (a pass more), and int32 indices' conversion kernel.
INDEX_PUT_COLUMNS_PER_STEP = 128
"""Columns a warp of `indexing_backward_kernel` covers per step: 32 lanes x 4 elements (SZ)."""
INDEX_PUT_RANGE_CHECK_KERNELS = 6
"""The range check's launches: a min and a max reduction of the indices, a comparison and an assert each."""


@dataclass(frozen=True)
class IndexPut:
    """An `index_put_` through integer indices (Note [index_put_'s two kernels])."""

    indices: int
    """Indices (the index tensors broadcast together)."""
    before: int
    """Elements of the dims before the first indexed dim."""
    after: int
    """Elements of the dims after the indexed ones: the slice written per index."""
    accumulate: bool
    range_check: bool
    """The sorting path checks the indices' range first (not when autograd calls it: unsafe=True)."""
    out_of_place: bool
    """`aten.index_put` copies `self` before writing."""

    @property
    def elements(self) -> int:
        return self.indices * self.before * self.after

    @property
    def warp_steps(self) -> int:
        return self.indices * self.before * _ceil_div(self.after, INDEX_PUT_COLUMNS_PER_STEP)


def index_put(op: OpCall) -> IndexPut | None:
    """The kernels an index_put runs; None for other ops and for boolean masks (Note [index_put_'s two kernels])."""
    p = packet_name(op.name)
    if p not in INDEX_PUT_OPS:
        return None
    b = bind(op)
    target, indices = b.get("self"), b.get("indices")
    if not isinstance(target, TensorMeta) or not isinstance(indices, tuple) or not indices:
        return None
    given = [(d, i) for d, i in enumerate(indices) if isinstance(i, TensorMeta)]
    if not given or any(i.dtype not in ("int64", "int32") for _, i in given):
        return None
    indexed = {d for d, _ in given}
    first = given[0][0]
    after = math.prod(n for d, n in enumerate(target.shape) if d > first and d not in indexed)
    accumulate = bool(b.get("accumulate", False))
    return IndexPut(max(i.numel for _, i in given), math.prod(target.shape[:first]), after, accumulate,
                    accumulate and not b.get("unsafe", False), p == "aten.index_put")


# ----------------------------------------------------------------------------- GEMM tiles

# Note [GEMM tile choice]
# cuBLAS (and CUTLASS's heuristics) runs a GEMM as a grid of output tiles, one CTA (or cluster) per tile, in
# waves over the SMs, and picks per problem the tile shape, and a split of K, that fills the GPU best. The kernel
# names it runs say which: on the H100 and H200, bf16 GEMMs run `nvjet_sm90_tst_AxB_...` kernels with one side of
# the tile 64, 128, 192 or 256 and the other any multiple of 8 (128x248, 256x144, ...: chosen so the tiles just fill
# a whole number of waves), tiles of at most 40960 outputs (256x160, 320x128); float32 GEMMs on CUDA cores run
# `cutlass_80_simt_sgemm_*` / `sm80_xmma_gemm_f32f32_*` kernels with tiles of 32 to 256 per side, at most 256x128;
# both split K (a `_splitK_` kernel or a `splitKreduce_kernel`, or a memset for an in-place reduction) when the tiles
# alone would leave SMs idle (data/<gpu>/kernels/, the profiler's kernel names).
#
# The model enumerates those tile shapes (`tiles` in the calibration: per kernel family, the sides and the largest
# tile) and splits of K (1 to `max_split`, each at least `split_k_min` deep), and takes the one with the least time:
#   waves = ceil(batch * ceil(m/tm) * ceil(n/tn) * split / SMs)
#   t     = waves * 2 * tm * tn * ceil(k/split) / (peak/SMs * eff * shape_eff) + reduction
# A wave costs a whole tile on every SM even where the tile hangs over the matrix's edge. A tile's efficiency falls
# with its size: its main loop loads tm + tn operand elements per tm * tn multiply-adds, so shape_eff = 1 / (1 +
# shape_c * (1/tm + 1/tn)), `shape_c` fitted (per family); `eff` is then the efficiency of an unboundedly large tile.
# A split of K adds the reduction of its fp32 partial sums, 2 * split * m * n * 4 bytes at the GEMM's bandwidth, and
# a kernel. The choice itself is made at the GPU's nominal peaks (the heuristic's view, not the fitted efficiencies),
# so it depends on the shape and the GPU only, and is cached.

GEMM_TILE_FAMILY = {"bf16": "tensor", "fp16": "tensor", "fp8": "tensor", "tf32": "tensor", "fp32": "simt", "fp64": "simt"}
"""The kernel family (and so the tile shapes) of each math mode: tensor-core kernels or CUDA-core (SIMT) ones."""
PARTIAL_SUM_BYTES = 4
"""A split-K partial sum is float32 whatever the GEMM's dtype (cuBLAS's compute type for bf16 and fp32)."""


@dataclass(frozen=True, slots=True)
class GemmTiling:
    """The tile configuration the model picks for one GEMM problem (Note [GEMM tile choice])."""

    tm: int
    """Tile rows (along m)."""
    tn: int
    """Tile columns (along n)."""
    split: int
    """Slices of K, each computed by its own CTA; above 1 their partial sums are reduced."""
    waves: int
    """ceil(tiles x split / SMs)."""
    shape_eff: float
    """The tile shape's efficiency factor, 1 / (1 + shape_c (1/tm + 1/tn))."""


@lru_cache(maxsize=64)
def gemm_tile_shapes(sides: tuple[int, ...], free: tuple[int, ...], max_area: int) -> tuple[tuple[int, int], ...]:
    """Every (tm, tn) with one side in `sides` and the other in `free`, of at most `max_area` outputs, both ways
    round; largest first (so a tie goes to the larger tile)."""
    shapes = {s for a in sides for b in free if a * b <= max_area for s in ((a, b), (b, a))}
    return tuple(sorted(shapes, key=lambda s: (-s[0] * s[1], s)))


@lru_cache(maxsize=16)
def _tile_arrays(shapes: tuple[tuple[int, int], ...]) -> tuple[Any, Any]:
    import numpy as np
    a = np.array(shapes, dtype=np.float64).reshape(-1, 2)
    return a[:, 0], a[:, 1]


@lru_cache(maxsize=1 << 16)
def choose_gemm_tiling(batch: int, m: int, n: int, k: int, shapes: tuple[tuple[int, int], ...], shape_c: float,
                       split_k_min: float, max_split: int, sms: int, peak_flops: float,
                       bandwidth_bytes_per_s: float) -> GemmTiling:
    """The tile shape and split of K that finish the GEMM soonest at the GPU's nominal peaks (Note [GEMM tile
    choice])."""
    import numpy as np
    tm, tn = _tile_arrays(shapes)
    splits = np.arange(1, max(1, max_split) + 1, dtype=np.float64)
    usable = (splits == 1) | (k / splits >= split_k_min)
    splits = splits[usable]
    tiles = batch * np.ceil(m / tm) * np.ceil(n / tn)
    waves = np.ceil(tiles[:, None] * splits[None, :] / sms)
    shape_eff = 1.0 / (1.0 + shape_c * (1.0 / tm + 1.0 / tn))
    per_sm = peak_flops / sms
    compute = waves * (2.0 * tm * tn / shape_eff)[:, None] * np.ceil(k / splits)[None, :] / per_sm
    reduce = np.where(splits > 1, 2.0 * splits * batch * m * n * PARTIAL_SUM_BYTES / bandwidth_bytes_per_s, 0.0)
    best = int(np.argmin(compute + reduce[None, :]))
    i, j = divmod(best, len(splits))
    return GemmTiling(int(tm[i]), int(tn[i]), int(splits[j]), int(waves[i, j]), float(shape_eff[i]))


# ----------------------------------------------------------------------------- the model


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def mta_launches(numels: Iterable[int], depth: int) -> int:
    """Kernel launches of PyTorch's multi_tensor_apply (ATen/native/cuda/MultiTensorApply.cuh):
    chunks of 65536 elements; a launch when 320 blocks are queued, or when the depth-dependent
    tensor limit is reached at a tensor's last chunk (the tensor being split is carried over)."""
    max_tensors = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}.get(depth, 30)
    max_blocks, chunk = 320, 65536
    launches = tensors = blocks = 0
    for n in numels:
        if n <= 0:
            continue
        tensors += 1
        total = blocks + _ceil_div(n, chunk)
        full, blocks = divmod(total, max_blocks)
        launches += full
        if full and blocks == 0:
            tensors = 0
        elif full:
            tensors = 1
        if tensors == max_tensors:
            launches += 1
            blocks = tensors = 0
    return launches + (1 if blocks else 0)


def _foreach_data_lists(op: OpCall) -> list[tuple[TensorMeta, ...]]:
    """A foreach op's tensor lists that hold data (not lists of one-element scalars such as step counts)."""
    lists = [v for v in op.args if isinstance(v, tuple) and v and isinstance(v[0], TensorMeta)]
    lists += [v for _, v in op.kwargs if isinstance(v, tuple) and v and isinstance(v[0], TensorMeta)]
    return [l for l in lists if any(t.numel > 1 for t in l)]


def _foreach_output_lists(packet: str) -> int:
    """Lists a foreach op allocates: one for an out-of-place op, none for in-place, norms and fused optimizers."""
    if packet.endswith("_") or packet == "aten._foreach_norm" or packet in FUSED_OPTIMIZER_OPS:
        return 0
    return 1


def foreach_launches(op: OpCall) -> int:
    """Kernel launches of a foreach or fused-optimizer op (multi_tensor_apply over its first data list;
    `_foreach_norm` adds its per-tensor reduction pass)."""
    big = _foreach_data_lists(op)
    if not big:
        return 0
    p = packet_name(op.name)
    depth = min(5, len(big) + _foreach_output_lists(p)) or 1
    launches = mta_launches([t.numel for t in big[0]], depth)
    return launches + 1 if p == "aten._foreach_norm" else launches


class ComputeModel:
    """Estimates the GPU time of intercepted ops for one GPU model.

    `database`: the measured kernel times of `gpu` (`KernelDatabase(gpu.key)` for the analytic model alone);
    `calibration`: the analytic model's constants. A GPU's profile (`phantora.specs.load_profile`) has both.
    """

    def __init__(self, gpu: GpuSpec, database: KernelDatabase, calibration: Calibration):
        self.gpu = gpu
        self.database = database
        if self.database.gpu != gpu.key:
            raise ValueError(f"kernel database is for {self.database.gpu}, not {gpu.key}")
        self.cal = calibration
        self._cache: dict[OpCall, KernelEstimate] = {}
        self._variant_scale: tuple[ComputeModel, ComputeModel] | None = None
        """For a variant: the analytic models, without kernel gaps, of this GPU and of the one its database was
        measured on (Note [GPU variants])."""
        if gpu.base is not None:
            gapless = dataclasses.replace(calibration, kernel_gap_ns=0.0)
            self._variant_scale = (ComputeModel(dataclasses.replace(gpu, base=None), KernelDatabase(gpu.key), gapless),
                                   ComputeModel(gpu.base, KernelDatabase(gpu.base.key), gapless))

    # -- public ------------------------------------------------------------------------------
    def estimate(self, op: OpCall) -> KernelEstimate:
        try:
            return self._cache[op]
        except KeyError:
            pass
        except TypeError:  # an unhashable argument slipped through: compute without caching
            return self._estimate(op)
        est = self._estimate(op)
        self._cache[op] = est
        return est

    def analytic(self, op: OpCall) -> KernelEstimate:
        """The analytic (or generic) estimate alone, ignoring the database."""
        return self._analytic(op)

    def add_measurement(self, op: OpCall, entry: DbEntry) -> KernelEstimate:
        """Add a measured entry to the database (on-the-fly profiling) and return the op's new estimate."""
        self.database.add(op, entry)
        self._cache.clear()  # other cached ops may now hit the entry through its loose key
        return self.estimate(op)

    # -- internals ---------------------------------------------------------------------------
    def _gap(self, n_kernels: int) -> float:
        return self.cal.kernel_gap_ns * n_kernels

    def _estimate(self, op: OpCall) -> KernelEstimate:
        if packet_name(op.name) in FREE_OPS:
            return KernelEstimate(0, 0.0, 0.0, "other", "analytic")
        hit = self.database.lookup(op)
        if hit is not None:
            entry, _ = hit
            cls = classify(op.name) or "other"
            flops, nbytes = self._work(op, cls)
            kernel_ns = entry.kernel_ns * self._variant_ratio(op)
            return KernelEstimate(int(round(kernel_ns + self._gap(entry.n_kernels))), flops, nbytes, cls, "measured")
        return self._analytic(op)

    def _variant_ratio(self, op: OpCall) -> float:
        """How much longer the op's kernels take on this GPU than on the one its measurement was taken on
        (Note [GPU variants]); 1 for a GPU's own measurements."""
        if self._variant_scale is None:
            return 1.0
        here, there = (model._analytic(op).duration_ns for model in self._variant_scale)
        return here / there if there > 0 else 1.0

    def _work(self, op: OpCall, cls: str) -> tuple[float, float]:
        if cls == "gemm":
            g = self._gemm_features(op)
            return g["flops"], g["bytes"]
        if cls == "attention":
            a = self._attention_features(op)
            return a["flops"], a["bytes"]
        if cls == "foreach":
            return 0.0, self._foreach_features(op)[0]
        return registry_flops(op), default_bytes(op)

    def _analytic(self, op: OpCall) -> KernelEstimate:
        p = packet_name(op.name)
        if p in FREE_OPS:
            return KernelEstimate(0, 0.0, 0.0, "other", "analytic")
        if p == "fsdp.all_gather_copy_in":  # Note [FSDP2's copy ops]
            return self._foreach(all_gather_copy_in_as_foreach_copy(op))
        if p in FSDP_COPY_ARGS:
            return self._memory(op, "copy", fsdp_copy_kind(op), "analytic")
        cls = classify(op.name)
        if cls == "gemm":
            return self._gemm(op)
        if cls == "attention":
            return self._attention(op)
        if cls == "foreach":
            return self._foreach(op)
        if cls is None:
            return self._memory(op, "other", "generic", "generic")
        kind = self._memory_kind(op, cls)
        mem = self.cal.memory
        if p in NORM_BACKWARD_OPS and "norm_weight_grad" in mem:
            return self._norm_backward(op, kind)
        if p in NORM_FORWARD_OPS and "row_ns" in mem.get(kind, {}):
            return self._norm_forward(op, kind)
        if kind == "cat_strided" and kind in mem:
            return self._cat_strided(op, strided_cat(op))  # type: ignore[arg-type]
        if kind in ("index_put", "index_put_accumulate") and kind in mem:
            return self._index_put(op, index_put(op))  # type: ignore[arg-type]
        if kind == "cat_strided":  # a calibration without the strided cat's terms: a strided copy of its bytes
            kind = "copy_strided"
        return self._memory(op, cls, kind, "analytic")

    # memory-bound ----------------------------------------------------------------------------
    def _memory_kind(self, op: OpCall, cls: str) -> str:
        p = packet_name(op.name)
        mem = self.cal.memory
        if cls == "copy":
            ins = op.tensor_inputs()
            src = ins[-1] if p == "aten.copy_" and len(ins) >= 2 else (ins[0] if ins else None)
            dst = op.outputs[0] if op.outputs else None
            if src is not None and dst is not None:
                if src.device.split(":")[0] != dst.device.split(":")[0]:
                    return "h2d" if dst.device.startswith("cuda") else "d2h"
                if p in CAST_COPY_OPS and src.dtype != dst.dtype:
                    return "cast_down" if itemsize(dst) < itemsize(src) else "cast_up"
                if p in CAST_COPY_OPS and not (is_contiguous(src) and is_contiguous(dst)):
                    return "strided_copy"
            if strided_cat(op) is not None:  # Note [Strided concatenation]
                return "cat_strided"
            if writes_strided_slices(op) or strided_access(op.tensor_inputs() + list(op.outputs)):
                return "copy_strided"
            return "copy"
        if cls == "index" and (ip := index_put(op)) is not None:  # Note [index_put_'s two kernels]
            return "index_put_accumulate" if ip.accumulate else "index_put"
        base = MEMORY_KIND_OF_CLASS.get(cls, "generic")
        if p in GENERATED_KERNELS:  # Triton's own loads and stores, not TensorIterator's paths
            return base
        if cls in ("elementwise", "other"):
            # Note [Pointwise kernel paths]
            strided = strided_access(op.tensor_inputs() + list(op.outputs)) or broadcast_input(op)
            cast = mixed_dtypes(op)
            if strided or cast:
                return base + ("_strided" if strided else "") + ("_cast" if cast else "")
        if p in mem:
            return p
        return base

    def _memory(self, op: OpCall, cls: str, kind: str, source: str) -> KernelEstimate:
        nbytes = default_bytes(op)
        if kind in ("h2d", "d2h"):
            link = self.cal.memory[kind]
            moved = sum(unique_bytes(t) for t in op.outputs) or nbytes / 2
            t = link["t0_ns"] + moved / link["bytes_per_s"] * 1e9
            return KernelEstimate(int(round(t + self._gap(1))), 0.0, moved, "memcpy", source)  # copy engines, not SMs
        mem = self.cal.memory
        p = (mem.get(kind) or mem.get(kind.removesuffix("_cast")) or mem.get(MEMORY_KIND_OF_CLASS.get(cls, "generic"))
             or mem["generic"])
        t = p["t0_ns"] + nbytes / (self.gpu.memory_bandwidth_bytes_per_s * p["bw_eff"]) * 1e9
        n_k = int(p.get("kernels", 1))
        return KernelEstimate(int(round(t + self._gap(n_k))), registry_flops(op), nbytes, cls, source)  # type: ignore[arg-type]

    def _norm_backward(self, op: OpCall, kind: str) -> KernelEstimate:
        """A LayerNorm or RMSNorm backward: its input-gradient kernel's bytes, then the weight gradient's re-read
        or its tiles in turn, whichever is longer (Note [Norm backward's weight gradient])."""
        mem = self.cal.memory
        p = mem.get(kind) or mem["norm"]
        bw = self.gpu.memory_bandwidth_bytes_per_s * p["bw_eff"]
        nbytes = default_bytes(op)
        t = p["t0_ns"] + (nbytes + self._second_pass_bytes(op)) / bw * 1e9 + norm_rows(op) * p.get("row_ns", 0.0)
        g = norm_weight_grad(op, self.gpu.sm_count)
        n_k = 1
        if g is not None:
            t += max(g.reread_bytes / bw * 1e9, g.serial_tiles * mem["norm_weight_grad"]["tile_ns"])
            n_k += 1 + g.split_rows
        copies = self._made_contiguous(op)
        return KernelEstimate(int(round(t + self._gap(n_k) + copies)), registry_flops(op), nbytes, "norm", "analytic")

    def _norm_forward(self, op: OpCall, kind: str) -> KernelEstimate:
        """A LayerNorm or RMSNorm forward: a block per row, its latency on top of the bytes (Note [Norms pay per
        row])."""
        p = self.cal.memory[kind]
        nbytes = default_bytes(op)
        read = nbytes + self._second_pass_bytes(op)
        bw = self.gpu.memory_bandwidth_bytes_per_s * p["bw_eff"]
        t = p["t0_ns"] + read / bw * 1e9 + norm_rows(op) * p["row_ns"]
        t += self._gap(int(p.get("kernels", 1))) + self._made_contiguous(op)
        return KernelEstimate(int(round(t)), registry_flops(op), nbytes, "norm", "analytic")

    def _made_contiguous(self, op: OpCall) -> float:
        """The copies a norm's CUDA implementation makes of its strided row operands (`expect_contiguous()` of the
        input, the output gradient, the weight and bias), each a strided copy with its kernel gap (Note [Norms pay per
        row])."""
        b = bind(op)
        t = 0.0
        for name in ("input", "grad_out", "weight", "bias"):
            x = b.get(name)
            if isinstance(x, TensorMeta) and not is_contiguous(x):
                dense = TensorMeta(x.shape, x.dtype, contiguous_strides(x.shape), x.device)
                copy = OpCall("aten.clone.default", (x,), (), (dense,))
                t += self._memory(copy, "copy", "strided_copy", "analytic").duration_ns
        return t

    def _second_pass_bytes(self, op: OpCall) -> float:
        """A norm row kernel's second pass, where it misses L1 (Note [Norms pay per row]); none for a calibration
        without the term."""
        rows = self.cal.memory.get("norm_rows")
        return norm_second_pass_bytes(op, rows["l1_row_bytes"]) if rows else 0.0

    def _cat_strided(self, op: OpCall, cat: StridedCat) -> KernelEstimate:
        """A concatenation with strided or expanded inputs: elements at the batched copy's rates, or its bytes,
        whichever is longer (Note [Strided concatenation])."""
        c = self.cal.memory["cat_strided"]
        per_element = c["elem_ns"] + c["dim_elem_ns"] * cat.dims
        largest = max(cat.elements) * per_element  # one input's own blocks
        together = sum(cat.elements) * per_element / c["parallel_inputs"]  # the SMs shared by the inputs
        nbytes = default_bytes(op)
        streamed = nbytes / (self.gpu.memory_bandwidth_bytes_per_s * c["bw_eff"]) * 1e9
        t = c["t0_ns"] + max(largest, together, streamed)
        return KernelEstimate(int(round(t + self._gap(cat.launches))), 0.0, nbytes, "copy", "analytic")

    def _index_put(self, op: OpCall, ip: IndexPut) -> KernelEstimate:
        """An index_put through integer indices: a thread per element, or a sort and a warp per run of equal
        indices (Note [index_put_'s two kernels])."""
        mem = self.cal.memory
        nbytes = default_bytes(op)
        if ip.accumulate:
            a = mem["index_put_accumulate"]
            t = a["t0_ns"] + ip.indices * a["index_ns"] + ip.warp_steps * a["step_ns"]
            n_k = int(a["kernels"])
            if ip.range_check:
                t, n_k = t + a["range_check_ns"], n_k + INDEX_PUT_RANGE_CHECK_KERNELS
        else:
            a = mem["index_put"]
            t, n_k = a["t0_ns"] + ip.elements * a["elem_ns"], int(a.get("kernels", 1))
        t += self._gap(n_k)
        if ip.out_of_place:  # `self` cloned first
            target = bind(op)["self"]
            clone = OpCall("aten.clone.default", (target,), (), (target,))
            t += self._memory(clone, "copy", "copy", "analytic").duration_ns
        return KernelEstimate(int(round(t)), 0.0, nbytes, "index", "analytic")

    # foreach ---------------------------------------------------------------------------------
    def _foreach_features(self, op: OpCall) -> tuple[float, int]:
        big = _foreach_data_lists(op)
        nbytes = float(sum(unique_bytes(t) for l in big for t in l))
        p = packet_name(op.name)
        inplace = p.endswith("_")
        if inplace and big:
            nbytes += sum(unique_bytes(t) for t in big[0])  # self written back
        if p.startswith("aten._fused_adam"):
            nbytes += sum(unique_bytes(t) for l in big[2:4] for t in l)  # moments written back
        if _foreach_output_lists(p) and big:
            nbytes += sum(unique_bytes(t) for t in big[0])
        return nbytes, foreach_launches(op)

    def _foreach(self, op: OpCall) -> KernelEstimate:
        nbytes, launches = self._foreach_features(op)
        f = self.cal.foreach.get(packet_name(op.name)) or self.cal.foreach["default"]
        t = launches * f["launch_ns"] + nbytes / (self.gpu.memory_bandwidth_bytes_per_s * f["bw_eff"]) * 1e9
        return KernelEstimate(int(round(t + self._gap(launches))), 0.0, nbytes, "foreach", "analytic")

    # gemm ------------------------------------------------------------------------------------
    def _gemm_features(self, op: OpCall) -> dict[str, Any]:
        p = packet_name(op.name)
        ts = [a for a in op.args if isinstance(a, TensorMeta)]
        if p in ("aten.addmm", "aten.baddbmm", "aten.addbmm", "aten.addmv") and len(ts) >= 3:
            bias, a, b = ts[0], ts[1], ts[2]
        else:
            bias, a, b = None, ts[0], ts[1] if len(ts) > 1 else ts[0]
        batch = 1
        if p in GROUPED_GEMM_OPS:
            batch, m, k, n, grouped_flops = grouped_gemm_dims(a, b, op.outputs[0] if op.outputs else None)
        elif len(a.shape) == 3:
            batch, m, k = a.shape
            n = b.shape[-1]
        elif len(a.shape) == 2:
            m, k = a.shape
            n = b.shape[-1] if len(b.shape) == 2 else 1
        else:  # dot / mv
            m, k, n = 1, a.shape[-1], 1
        flops = grouped_flops if p in GROUPED_GEMM_OPS else (registry_flops(op) or 2.0 * batch * m * n * k)
        nbytes = float(sum(unique_bytes(t) for t in ts) + sum(unique_bytes(o) for o in op.outputs))
        align = 16 // itemsize(a)

        def aligned(t: TensorMeta) -> bool:
            if len(t.shape) < 2:
                return True
            ld = max(t.stride[-1], t.stride[-2])
            return ld % align == 0 or min(t.shape[-1], t.shape[-2]) == 1

        ok = aligned(a) and aligned(b) and all(aligned(o) for o in op.outputs)
        return {"m": m, "n": n, "k": k, "batch": batch, "flops": flops, "bytes": nbytes, "dtype": a.dtype, "aligned": ok,
                "grouped": p in GROUPED_GEMM_OPS}

    def _math_mode(self, dtype: str) -> str:
        return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
                "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(dtype, "fp32")

    def gemm_tiling(self, op: OpCall) -> GemmTiling:
        """The tile shape and split of K the model runs the GEMM `op` with (Note [GEMM tile choice])."""
        g = self._gemm_features(op)
        return self._tiling(g, self._math_mode(g["dtype"]))

    def _tiling(self, g: dict[str, Any], mode: str) -> GemmTiling:
        c = self.cal.gemm
        family = GEMM_TILE_FAMILY.get(mode, "simt")
        rule = c["tiles"][family]
        if g["grouped"]:  # PyTorch's CUTLASS kernel: one tile, no split of K (Note [Grouped GEMMs])
            shapes, max_split = (grouped_gemm_tile(g["m"], g["n"], self.gpu.compute_capability),), 1
        else:
            shapes = gemm_tile_shapes(tuple(rule["sides"]), tuple(rule["free"]), int(rule["max_area"]))
            max_split = int(c["max_split"])
        return choose_gemm_tiling(g["batch"], max(1, g["m"]), max(1, g["n"]), max(1, g["k"]), shapes,
                                  float(rule["shape_c"]), float(c["split_k_min"]), max_split,
                                  self.gpu.sm_count, self._peak(mode), self.gpu.memory_bandwidth_bytes_per_s)

    def _peak(self, mode: str) -> float:
        return self.gpu.peak_flops.get(mode) or self.gpu.peak_flops.get("fp32", 1e12)

    def _gemm(self, op: OpCall) -> KernelEstimate:
        g = self._gemm_features(op)
        c = self.cal.gemm
        mode = self._math_mode(g["dtype"])
        peak = self._peak(mode)
        mp = c["modes"].get(mode) or c["modes"]["fp32"]
        eff = mp["eff"] if g["aligned"] else mp.get("eff_unaligned", mp["eff"])
        tiling = self._tiling(g, mode)
        bw = self.gpu.memory_bandwidth_bytes_per_s * c["bw_eff"]
        tile_flops = 2.0 * tiling.tm * tiling.tn * _ceil_div(g["k"], tiling.split)
        t_compute = tiling.waves * tile_flops / (peak / self.gpu.sm_count * eff * tiling.shape_eff) * 1e9
        if not g["flops"]:  # an empty GEMM (k = 0) only writes its output
            t_compute = 0.0
        t_memory = g["bytes"] / bw * 1e9
        t_reduce = 0.0
        if tiling.split > 1:  # the partial sums, written and read back in float32
            t_reduce = 2.0 * tiling.split * g["batch"] * g["m"] * g["n"] * PARTIAL_SUM_BYTES / bw * 1e9
        t = c["t0_ns"] + max(t_compute, t_memory) + t_reduce
        # big cuBLAS GEMMs also launch a memset; a split of K a reduction (or a memset for an in-place one)
        n_k = 2 if g["m"] * g["n"] >= c["two_kernel_mn"] or tiling.split > 1 else 1
        return KernelEstimate(int(round(t + self._gap(n_k))), g["flops"], g["bytes"], "gemm", "analytic")

    # attention ---------------------------------------------------------------------------------
    def _attention_features(self, op: OpCall) -> dict[str, Any]:
        p = packet_name(op.name)
        b = bind(op)
        backward = p.endswith("backward")
        backend = "cudnn" if "cudnn" in p else ("efficient" if "efficient" in p else "flash")
        q, k, v = b.get("query"), b.get("key"), b.get("value")
        bshd = p in ("aten._flash_attention_forward", "aten._flash_attention_backward",
                     "aten._efficient_attention_forward", "aten._efficient_attention_backward")
        if bshd:
            bsz, sq, hq, d = q.shape
            sk, hk = k.shape[1], k.shape[2]
        else:
            bsz, hq, sq, d = q.shape
            hk, sk = k.shape[1], k.shape[2]
        # the value head dim may differ from the query/key one (DeepSeek's MLA: 192 and 128); a backward op's value
        # is bound too
        dv = v.shape[-1] if v is not None else d
        causal = bool(b.get("is_causal", False)) or b.get("custom_mask_type", 0) == 1
        pairs = sq * sk
        if causal:  # PyTorch's is_causal mask is top-left aligned: row i keeps keys j <= i
            pairs = sq * (sq + 1) // 2 if sq <= sk else sk * (sk + 1) // 2 + (sq - sk) * sk
        flops_fwd = 2.0 * bsz * hq * pairs * (d + dv)  # Q K^T, then P V
        flops = flops_fwd * (2.5 if backward else 1.0)
        # block-granular work actually done by a tiled kernel (128x128 tiles; causal skips whole tiles)
        bq = _ceil_div(sq, 128)
        bk = _ceil_div(sk, 128)
        blocks = bq * (bk + 1) / 2 if causal and sq == sk else bq * bk
        tile_flops = 2.0 * bsz * hq * blocks * 128 * 128 * (d + dv) * (2.5 if backward else 1.0)
        # score elements of those tiles: the softmax work (exp, max, rescale) per (query, key) pair
        # does not shrink with the head dim, so at d=64 a kernel reaches a smaller share of peak
        tile_pairs = float(bsz * hq * blocks * 128 * 128)
        elem = itemsize(q)
        nbytes = float((bsz * hq * sq * (d + dv) + bsz * hk * sk * (d + dv)) * elem * (2 if backward else 1))
        return {"backend": backend, "backward": backward, "flops": flops, "tile_flops": tile_flops,
                "tile_pairs": tile_pairs, "rows": float(bsz * hq * sq * (d + dv) / 2), "bytes": nbytes,
                "dtype": q.dtype, "d": d}

    def _attention(self, op: OpCall) -> KernelEstimate:
        a = self._attention_features(op)
        cal = self.cal.attention
        key = f"{a['backend']}_{'bwd' if a['backward'] else 'fwd'}"
        c = cal.get(key) or cal["flash_bwd" if a["backward"] else "flash_fwd"]
        mode = self._math_mode(a["dtype"])
        peak = self.gpu.peak_flops.get(mode) or self.gpu.peak_flops.get("bf16", 1e12)
        ref_peak = cal["reference_peak_flops"]
        ref_bw = cal["reference_bandwidth_bytes_per_s"]
        # t = t0 + per-row cost (memory-ish: scaled by bandwidth) + tile FLOPs at a fitted rate
        #     + per score element of the computed tiles (softmax exp: scaled with the tensor peak too).
        # cuDNN's two terms come from 4 points each (d=64 and 128) and its fitted FLOP rate alone exceeds
        # the peak; FLOPs + softmax never run faster than the dense peak (bounds d=256).
        tiles = max(a["tile_flops"] / peak * 1e9,
                    a["tile_flops"] / (peak * c["eff"]) * 1e9 + c.get("pair_ns", 0.0) * a["tile_pairs"] * ref_peak / peak)
        t = c["t0_ns"] + c["row_ns"] * a["rows"] * ref_bw / self.gpu.memory_bandwidth_bytes_per_s + tiles
        n_k = int(c.get("kernels", 1))
        return KernelEstimate(int(round(t + self._gap(n_k))), a["flops"], a["bytes"], "attention", "analytic")
