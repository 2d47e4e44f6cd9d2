"""Microbenchmark sweeps of the layouts that change a kernel's speed for the same bytes (run on the GPU machine).

    benchmarks/common/run_subject.sh kernels shapes      # into data/<gpu>/kernels/micro/shape_sweeps/

Three families, each over shapes, bfloat16 and float32, timed the way measure_micro.py times its sweeps (its
`run_family`: 2 warm-up and 5 timed calls under the recording dispatch mode and the profiler, the L2 evicted
before each):
- `cat_strided`: `torch.cat` along the last dimension (and once along the first) with strided inputs (a slice of a
  wider last dimension, an expanded broadcast), 2-4 dimensions, against the same concatenation of contiguous
  inputs. PyTorch's CUDA cat takes a vectorized kernel only when every input is contiguous; otherwise it runs
  `CatArrayBatchedCopy`, one element per thread with an index computation per dimension.
- `norm_narrow`: RMSNorm (and LayerNorm) forward and backward over hidden sizes 128-8192 and 4096-131072 rows. The
  weight gradient (`GammaBetaBackwardCUDAKernelTemplate`) runs one block per 32 columns over all rows below 65537 rows.
- `index_put`: `index_put_` of rows, without accumulation (a permutation's scatter) and with it (the backward of a
  row gather: sort, then `indexing_backward_kernel`), widths 64-1024.

Writes $OUT/shapes_ops.jsonl.gz (measure_micro.py's format: "ctx" = "family|config index|rep|cold", "cfg") and
$OUT/meta.json. The shapes are a grid, not any one program's.
"""

import torch

from benchmarks.kernels import measure_micro as mm
from benchmarks.kernels.measure_micro import BF16, DEV, FP32, rnd

DT = {"bf16": BF16, "fp32": FP32}


def cat_configs():
    cfgs = []
    for dt in ("bf16", "fp32"):
        for B in (1, 4, 16):  # 4 dims: a slice of a 192-wide last dim, then a contiguous 64-wide one; and contiguous
            cfgs.append(dict(op="cat", dt=dt, parts=[[B, 4096, 16, 128, 192], [B, 4096, 16, 64, 64]]))
            cfgs.append(dict(op="cat", dt=dt, parts=[[B, 4096, 16, 128, 128], [B, 4096, 16, 64, 64]]))
        for B in (2, 8):
            cfgs.append(dict(op="cat", dt=dt, parts=[[B, 4096, 16, 128, 192], [B, 4096, 16, 128, 128]]))
            cfgs.append(dict(op="cat", dt=dt, parts=[[B, 4096, 16, 128, 256], [B, 4096, 16, 64, -1]]))  # -1: expanded over dim 2
        for N in (65536, 1 << 20):  # 3 and 2 dims
            cfgs.append(dict(op="cat", dt=dt, parts=[[N // 16, 16, 128, 192], [N // 16, 16, 64, 64]]))
            cfgs.append(dict(op="cat", dt=dt, parts=[[N, 128, 192], [N, 64, 64]]))
            cfgs.append(dict(op="cat", dt=dt, parts=[[N, 128, 128], [N, 64, 64]]))
        for N, (a, wa), (b, wb) in ((1 << 18, (512, 576), (64, 64)), (1 << 20, (32, 64), (32, 32)), (1 << 20, (64, 96), (32, 32))):
            cfgs.append(dict(op="cat", dt=dt, parts=[[N, a, wa], [N, b, wb]]))
        cfgs.append(dict(op="cat", dt=dt, parts=[[1 << 19, 64, 128], [1 << 19, 64, 128], [1 << 19, 64, 64]]))
        cfgs.append(dict(op="cat", dt=dt, parts=[[1 << 19, 256, 512], [1 << 19, 256, 512]], dim=0))
    return cfgs


def make_cat(c):
    dt = DT[c["dt"]]
    ts = []
    for p in c["parts"]:
        *lead, n, w = p
        if w == -1:  # expanded over the third dim (a rotary key part shared by the heads)
            ts.append(rnd(tuple(lead[:2]) + (1, n), dt).expand(*lead, n))
        else:
            ts.append(rnd((*lead, w), dt)[..., :n])
    dim = c.get("dim", -1)
    return lambda: torch.cat(ts, dim)


def norm_configs():
    cfgs = []
    for dt in ("bf16", "fp32"):
        for T in (4096, 16384, 32768, 65536, 131072):
            for D in (128, 256, 512, 1024, 2048, 4096, 8192):
                if T * D <= 1 << 28:
                    cfgs.append(dict(op="rms_norm", T=T, D=D, dt=dt))
    for T in (32768, 131072):
        for D in (256, 1024):
            cfgs.append(dict(op="layer_norm", T=T, D=D, dt="bf16"))
    return cfgs


def index_put_configs():
    cfgs = []
    for dt in ("bf16", "fp32"):
        for n in (16384, 65536, 262144):
            for W in (64, 256, 1024):
                if n * W <= 1 << 26:
                    cfgs.append(dict(op="index_put", n=n, rows=n, W=W, dt=dt, acc=0))
                    cfgs.append(dict(op="index_put", n=n, rows=n // 4, W=W, dt=dt, acc=1))
        cfgs.append(dict(op="index_put", n=65536, rows=65536, W=256, dt=dt, acc=1))
        cfgs.append(dict(op="index_put", n=65536, rows=131072, W=256, dt=dt, acc=0, idx="int32"))
    return cfgs


def make_index_put(c):
    dt = DT[c["dt"]]
    n, rows, W = c["n"], c["rows"], c["W"]
    out = rnd((rows, W), dt)
    vals = rnd((n, W), dt)
    if c["acc"]:
        idx = torch.randint(0, rows, (n,), device=DEV)
    else:
        idx = torch.randperm(rows, device=DEV)[:n]
    if c.get("idx") == "int32":
        idx = idx.to(torch.int32)
    return lambda: out.index_put_((idx,), vals, accumulate=bool(c["acc"]))


FAMILIES = {
    "cat_strided": (cat_configs, make_cat),
    "norm_narrow": (norm_configs, mm.make_norm),
    "index_put": (index_put_configs, make_index_put),
}


def main():
    mm.measure(FAMILIES, "layout microbenchmarks, one op per line", "shapes_ops", __file__)


if __name__ == "__main__":
    main()
