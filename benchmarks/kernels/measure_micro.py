"""Microbenchmark sweeps per kernel class (run on the GPU machine).

Each config builds its inputs, runs WARM untimed calls, then REPS calls each under the recording
dispatch mode inside one profiler session per family; kernel durations come from the profiler
(CUPTI), so launch gaps are excluded. Before each timed call a 256 MiB buffer is zeroed to evict
the 60 MB L2 ("cold"); configs marked hot skip that. Stops starting configs after $DEADLINE
(epoch seconds). Writes $OUT/micro_ops.jsonl.gz: a header, then one line per recorded op with
"ctx" = "family|config index|rep|cold/hot" and "cfg" = the config.

Selecting families: PH_FAMILIES=gemm,sdpa,... (default: all, in the order below).
"""

import gc
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

from benchmarks.common.env import write_meta
from benchmarks.common.encode import Recorder, attach_kernels, new_profile, out_dir, write_jsonl_gz

DRY = os.environ.get("PH_DRY") == "1"
DEV = "cpu" if DRY else "cuda"
DEADLINE = float(os.environ.get("DEADLINE", time.time() + 3600))
REPS, WARM = (2, 1) if DRY else (5, 2)
BF16, FP32 = torch.bfloat16, torch.float32
FLUSH = torch.empty((16 if DRY else 256) << 18, dtype=torch.int32, device=DEV)
SCALE = 64 if DRY else 1  # dry run: shrink sizes


def rnd(shape, dtype, requires_grad=False):
    t = torch.randn(shape, device=DEV, dtype=FP32 if dtype in (torch.int64,) else dtype)
    return t.requires_grad_(requires_grad) if requires_grad else t


def sync():
    if not DRY:
        torch.cuda.synchronize()


# ---------------------------------------------------------------- configs


def gemm_configs():
    cfgs = []
    sq = [256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384]
    for n in sq:
        cfgs.append(dict(op="mm", M=n, N=n, K=n, dt="bf16", ta=0, tb=0))
    for n in sq[:-1]:
        cfgs.append(dict(op="mm", M=n, N=n, K=n, dt="fp32", ta=0, tb=0))
    llama = [(3072, 3072), (1024, 3072), (8192, 3072), (3072, 8192), (128256, 3072), (14336, 4096), (4096, 14336), (4096, 4096)]
    for N, K in llama:
        cfgs.append(dict(op="mm", M=4096, N=N, K=K, dt="bf16", ta=0, tb=1))   # forward x @ W^T
        cfgs.append(dict(op="mm", M=4096, N=K, K=N, dt="bf16", ta=0, tb=0))   # grad_input g @ W
        cfgs.append(dict(op="mm", M=N, N=K, K=4096, dt="bf16", ta=1, tb=0))   # grad_weight g^T @ x
    for N, K in llama[:4]:
        cfgs.append(dict(op="mm", M=4096, N=N, K=K, dt="fp32", ta=0, tb=1))
    for M in [1, 8, 32, 64, 128, 256, 512, 1024, 2048, 8192, 16384, 32768]:
        cfgs.append(dict(op="mm", M=M, N=4096, K=4096, dt="bf16", ta=0, tb=1))
        cfgs.append(dict(op="mm", M=M, N=14336, K=4096, dt="bf16", ta=0, tb=1))
    for M, N, K in [(8192, 8192, 64), (8192, 8192, 128), (16384, 16384, 256), (64, 64, 65536), (256, 256, 65536),
                    (1024, 1024, 65536), (128, 4096, 128), (4096, 128, 4096), (4096, 50304, 768), (2048, 2048, 16384),
                    (1000, 1000, 1000), (4095, 4097, 4099), (3000, 5000, 7000)]:
        cfgs.append(dict(op="mm", M=M, N=N, K=K, dt="bf16", ta=0, tb=0))
    rng = random.Random(1234)
    for i in range(60):
        M, N, K = (int(2 ** rng.uniform(6, 14.5)) for _ in range(3))
        if i % 3 == 0:
            M, N, K = (max(64, x // 64 * 64) for x in (M, N, K))
        dt = "fp32" if i % 4 == 3 else "bf16"
        cfgs.append(dict(op="mm", M=M, N=N, K=K, dt=dt, ta=rng.randint(0, 1), tb=rng.randint(0, 1), random=1))
    for M, N, K in [(4096, 3072, 3072), (8192, 4096, 4096), (1024, 1024, 1024), (4096, 128256, 3072)]:
        cfgs.append(dict(op="addmm", M=M, N=N, K=K, dt="bf16", ta=0, tb=1))
    for B, M, N, K in [(8, 1024, 1024, 1024), (32, 512, 512, 128), (64, 2048, 2048, 64), (16, 4096, 4096, 128), (96, 1024, 128, 1024)]:
        cfgs.append(dict(op="bmm", B=B, M=M, N=N, K=K, dt="bf16", ta=0, tb=0))
    return cfgs


def make_gemm(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    M, N, K = (max(1, c[k] // SCALE) for k in ("M", "N", "K"))
    if c["op"] == "bmm":
        B = c["B"]
        a, b = rnd((B, M, K), dt), rnd((B, K, N), dt)
        return lambda: torch.bmm(a, b)
    a = rnd((K, M), dt).t() if c["ta"] else rnd((M, K), dt)
    b = rnd((N, K), dt).t() if c["tb"] else rnd((K, N), dt)
    if c["op"] == "addmm":
        bias = rnd((N,), dt)
        return lambda: torch.addmm(bias, a, b)
    return lambda: torch.mm(a, b)


def sdpa_configs():
    cfgs = []
    for S in [512, 1024, 2048, 4096, 8192]:
        for D, H in [(128, 24), (64, 32)]:
            for causal in (1, 0):
                cfgs.append(dict(B=1, H=H, Hkv=H, S=S, D=D, causal=causal, layout="bhsd", backend="flash"))
    cfgs.append(dict(B=1, H=24, Hkv=24, S=4096, D=128, causal=1, layout="bshd", backend="flash"))
    cfgs.append(dict(B=2, H=32, Hkv=32, S=8192, D=128, causal=1, layout="bshd", backend="flash"))
    cfgs.append(dict(B=4, H=16, Hkv=16, S=2048, D=128, causal=1, layout="bhsd", backend="flash"))
    cfgs.append(dict(B=8, H=12, Hkv=12, S=1024, D=64, causal=1, layout="bhsd", backend="flash"))
    cfgs.append(dict(B=1, H=32, Hkv=8, S=4096, D=128, causal=1, layout="bhsd", backend="any"))
    cfgs.append(dict(B=1, H=24, Hkv=8, S=8192, D=128, causal=1, layout="bhsd", backend="any"))
    cfgs.append(dict(B=1, H=24, Hkv=24, S=4096, D=128, causal=1, layout="bhsd", backend="efficient"))
    cfgs.append(dict(B=1, H=24, Hkv=24, S=4096, D=128, causal=0, layout="bhsd", backend="efficient"))
    cfgs.append(dict(B=4, H=16, Hkv=16, S=1024, D=64, causal=1, layout="bhsd", backend="efficient"))
    return cfgs


def make_sdpa(c):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H, Hkv, S, D = c["B"], c["H"], c["Hkv"], max(8, c["S"] // SCALE), c["D"]

    def t(h):
        if c["layout"] == "bshd":
            return rnd((B, S, h, D), BF16).transpose(1, 2).detach().requires_grad_()
        return rnd((B, h, S, D), BF16, True)

    q, k, v = t(H), t(Hkv), t(Hkv)
    go = rnd((B, H, S, D), BF16)
    backends = {"flash": [SDPBackend.FLASH_ATTENTION], "efficient": [SDPBackend.EFFICIENT_ATTENTION],
                "any": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]}[c["backend"]]
    if DRY:
        backends = [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]

    def fn():
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(c["causal"]), enable_gqa=Hkv != H)
        torch.autograd.grad(o, (q, k, v), go)
    return fn


def elementwise_configs():
    cfgs = []
    ops = ["add", "mul", "silu", "clone", "copy_", "to_f32", "to_bf16", "add_", "mul_scalar", "rsqrt", "silu_backward", "transpose_copy"]
    sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30]
    for op in ops:
        for dt in ("bf16", "fp32"):
            if op in ("to_f32", "to_bf16") and dt == "fp32":
                continue
            if op in ("rsqrt", "silu_backward", "transpose_copy", "add_", "mul_scalar") and dt == "bf16":
                continue
            for b in sizes:
                if b == 4 << 30 and op not in ("add", "copy_", "to_f32"):
                    continue
                cfgs.append(dict(op=op, dt=dt, bytes=b))
                if b <= 64 << 20 and op in ("add", "mul", "to_f32", "copy_"):
                    cfgs.append(dict(op=op, dt=dt, bytes=b, hot=1))
    return cfgs


def make_elementwise(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    n = max(256, c["bytes"] // (2 if dt == BF16 else 4) // SCALE)
    op = c["op"]
    a = rnd((n,), dt)
    if op == "add":
        b = rnd((n,), dt)
        return lambda: a + b
    if op == "mul":
        b = rnd((n,), dt)
        return lambda: a * b
    if op == "silu":
        return lambda: F.silu(a)
    if op == "clone":
        return lambda: a.clone()
    if op == "copy_":
        b = torch.empty_like(a)
        return lambda: b.copy_(a)
    if op == "to_f32":
        return lambda: a.float()
    if op == "to_bf16":
        return lambda: a.to(BF16)
    if op == "add_":
        b = rnd((n,), dt)
        return lambda: a.add_(b)
    if op == "mul_scalar":
        return lambda: a * 0.5
    if op == "rsqrt":
        a.abs_()
        return lambda: torch.rsqrt(a)
    if op == "silu_backward":
        g = rnd((n,), dt)
        return lambda: torch.ops.aten.silu_backward(g, a)
    if op == "transpose_copy":
        r = 1 << (int(math.log2(n)) // 2)
        x = rnd((r, n // r), dt)
        return lambda: x.t().contiguous()
    raise ValueError(op)


def reduction_configs():
    cfgs = []
    shapes = [(4096, 3072), (4096, 8192), (8192, 4096), (1024, 1024), (64, 1 << 20), (1 << 20, 64), (32768, 4096), (4096, 128256), (128, 128)]
    for R, C in shapes:
        for op in ("sum_last", "mean_last_keep", "sum_all", "sum_first", "amax_last"):
            cfgs.append(dict(op=op, R=R, C=C, dt="fp32"))
        cfgs.append(dict(op="sum_last", R=R, C=C, dt="bf16"))
        cfgs.append(dict(op="linalg_norm", R=R, C=C, dt="fp32"))
    return cfgs


def make_reduction(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    x = rnd((max(1, c["R"] // SCALE), max(1, c["C"] // SCALE)), dt)
    return {"sum_last": lambda: x.sum(-1), "mean_last_keep": lambda: x.mean(-1, keepdim=True), "sum_all": lambda: x.sum(),
            "sum_first": lambda: x.sum(0), "amax_last": lambda: x.amax(-1),
            "linalg_norm": lambda: torch.linalg.vector_norm(x)}[c["op"]]


def norm_configs():
    cfgs = []
    for T, D in [(4096, 1024), (4096, 3072), (8192, 4096), (16384, 2048), (32768, 8192)]:
        for dt in ("bf16", "fp32"):
            cfgs.append(dict(op="layer_norm", T=T, D=D, dt=dt))
            cfgs.append(dict(op="rms_norm", T=T, D=D, dt=dt))
        cfgs.append(dict(op="softmax", T=T, D=D, dt="fp32"))
        cfgs.append(dict(op="softmax", T=T, D=D, dt="bf16"))
    return cfgs


def make_norm(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    T, D = max(2, c["T"] // SCALE), max(8, c["D"] // SCALE)
    x = rnd((T, D), dt, True)
    w = rnd((D,), dt, True)
    b = rnd((D,), dt, True)
    g = rnd((T, D), dt)
    if c["op"] == "layer_norm":
        return lambda: torch.autograd.grad(F.layer_norm(x, (D,), w, b), (x, w, b), g)
    if c["op"] == "rms_norm":
        return lambda: torch.autograd.grad(F.rms_norm(x, (D,), w), (x, w), g)
    return lambda: torch.autograd.grad(torch.softmax(x, -1), (x,), g)


def loss_configs():
    cfgs = []
    for T in (2048, 4096, 8192):
        for V in (32000, 50304, 128256):
            cfgs.append(dict(T=T, V=V, dt="fp32"))
    for T, V in [(4096, 128256), (8192, 50304), (16384, 32000)]:
        cfgs.append(dict(T=T, V=V, dt="bf16"))
    return cfgs


def make_loss(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    T, V = max(4, c["T"] // SCALE), max(16, c["V"] // SCALE)
    x = rnd((T, V), dt, True)
    tgt = torch.randint(0, V, (T,), device=DEV)
    return lambda: torch.autograd.grad(F.cross_entropy(x, tgt), (x,))


def embedding_configs():
    cfgs = []
    for V in (32000, 128256):
        for D in (2048, 3072, 4096):
            for T in (4096, 16384):
                cfgs.append(dict(V=V, D=D, T=T, dt="fp32"))
    cfgs.append(dict(V=128256, D=4096, T=8192, dt="bf16"))
    return cfgs


def make_embedding(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    V, D, T = max(16, c["V"] // SCALE), max(8, c["D"] // SCALE), max(4, c["T"] // SCALE)
    W = rnd((V, D), dt, True)
    idx = torch.randint(0, V, (1, T), device=DEV)
    g = rnd((1, T, D), dt)
    return lambda: torch.autograd.grad(F.embedding(idx, W), (W,), g)


def misc_configs():
    cfgs = []
    for n in (1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 28):
        for op in ("normal_", "uniform_", "random_int64", "fill_", "zero_", "zeros_like", "dropout"):
            cfgs.append(dict(op=op, n=n))
    for op in ("cat_last", "stack_last", "index_select", "gather", "scatter_add_", "repeat_interleave", "where", "masked_fill", "cumsum", "arange"):
        for n in (1 << 16, 1 << 22, 1 << 26):
            cfgs.append(dict(op=op, n=n))
    return cfgs


def make_misc(c):
    n = max(256, c["n"] // SCALE)
    op = c["op"]
    if op in ("normal_", "uniform_", "fill_", "zero_"):
        x = torch.empty(n, device=DEV)
        return {"normal_": lambda: x.normal_(), "uniform_": lambda: x.uniform_(), "fill_": lambda: x.fill_(1.5),
                "zero_": lambda: x.zero_()}[op]
    if op == "random_int64":
        return lambda: torch.randint(0, 128256, (n,), device=DEV)
    if op == "zeros_like":
        x = torch.empty(n, device=DEV, dtype=BF16)
        return lambda: torch.zeros_like(x)
    if op == "dropout":
        x = rnd((n,), BF16)
        return lambda: F.dropout(x, 0.1, training=True)
    x = rnd((n // 128, 128), BF16)
    if op == "cat_last":
        y = rnd((n // 128, 128), BF16)
        return lambda: torch.cat([x, y], -1)
    if op == "stack_last":
        y = rnd((n // 128, 128), BF16)
        return lambda: torch.stack([x, y], -1)
    if op == "index_select":
        idx = torch.randint(0, n // 128, (n // 128,), device=DEV)
        return lambda: x.index_select(0, idx)
    if op == "gather":
        idx = torch.randint(0, 128, (n // 128, 128), device=DEV)
        return lambda: x.gather(1, idx)
    if op == "scatter_add_":
        idx = torch.randint(0, 128, (n // 128, 128), device=DEV)
        y = torch.zeros_like(x)
        return lambda: y.scatter_add_(1, idx, x)
    if op == "repeat_interleave":
        z = rnd((1, n // 1024, 8, 128), BF16)
        return lambda: z.repeat_interleave(3, dim=2)
    if op == "where":
        m = x > 0
        return lambda: torch.where(m, x, 0.0)
    if op == "masked_fill":
        m = x > 0
        return lambda: x.masked_fill(m, 0.0)
    if op == "cumsum":
        return lambda: x.float().cumsum(-1)
    if op == "arange":
        return lambda: torch.arange(n, device=DEV)
    raise ValueError(op)


def foreach_configs():
    cfgs = []
    for nt, numel in [(1, 1 << 26), (10, 1 << 20), (100, 1 << 20), (1000, 1 << 20), (100, 1 << 24), (1000, 1 << 12),
                      (10000, 1 << 10), (200, 3 << 20), (30, 1 << 16), (3, 1 << 10)]:
        for impl in ("foreach", "fused"):
            cfgs.append(dict(nt=nt, numel=numel, impl=impl, dt="fp32"))
    for nt, numel in [(100, 1 << 20), (1000, 1 << 16)]:
        cfgs.append(dict(nt=nt, numel=numel, impl="foreach", dt="bf16"))
    return cfgs


def make_foreach(c):
    dt = BF16 if c["dt"] == "bf16" else FP32
    numel = max(16, c["numel"] // SCALE)
    params = [torch.nn.Parameter(rnd((numel,), dt)) for _ in range(c["nt"])]
    for p in params:
        p.grad = rnd((numel,), dt)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, **({"fused": True} if c["impl"] == "fused" else {"foreach": True}))

    def fn():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
    return fn


def cast_configs():
    cfgs = []
    for b in [4 << 10, 256 << 10, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]:
        cfgs.append(dict(op="to_bf16", dt="fp32", bytes=b))
        cfgs.append(dict(op="to_f32", dt="bf16", bytes=b // 2))
    for r, c in [(3072, 3072), (1024, 3072), (8192, 3072), (3072, 8192), (128256, 3072), (4096, 4096), (14336, 4096)]:
        cfgs.append(dict(op="to_bf16_2d", R=r, C=c))
        cfgs.append(dict(op="to_bf16_2d_t", R=r, C=c))
    return cfgs


def make_cast(c):
    if c["op"] == "to_bf16":
        a = rnd((max(256, c["bytes"] // 4 // SCALE),), FP32)
        return lambda: a.to(BF16)
    if c["op"] == "to_f32":
        a = rnd((max(256, c["bytes"] // 2 // SCALE),), BF16)
        return lambda: a.float()
    w = rnd((max(1, c["R"] // SCALE), max(1, c["C"] // SCALE)), FP32)
    if c["op"] == "to_bf16_2d_t":
        return lambda: w.t().to(BF16)
    return lambda: w.to(BF16)


def transfer_configs():
    cfgs = []
    for b in [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]:
        for op in ("h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned"):
            cfgs.append(dict(op=op, bytes=b))
    return cfgs


def make_transfer(c):
    n = max(256, c["bytes"] // 4 // SCALE)
    op = c["op"]
    if op.startswith("h2d"):
        x = torch.randn(n)
        if op == "h2d_pinned" and not DRY:
            x = x.pin_memory()
        return lambda: x.to(DEV, non_blocking=op == "h2d_pinned")
    x = rnd((n,), FP32)
    if op == "d2h_pinned" and not DRY:
        dst = torch.empty(n, pin_memory=True)
        return lambda: dst.copy_(x, non_blocking=True)
    return lambda: x.cpu()


FAMILIES = {
    "cast2": (cast_configs, make_cast),
    "transfer": (transfer_configs, make_transfer),
    "gemm": (gemm_configs, make_gemm),
    "sdpa": (sdpa_configs, make_sdpa),
    "elementwise": (elementwise_configs, make_elementwise),
    "foreach": (foreach_configs, make_foreach),
    "loss": (loss_configs, make_loss),
    "embedding": (embedding_configs, make_embedding),
    "reduction": (reduction_configs, make_reduction),
    "norm": (norm_configs, make_norm),
    "misc": (misc_configs, make_misc),
}


def run_family(name, configs, make, all_rows, kn, errors):
    rec = Recorder()
    cfg_of = {}
    done = 0
    with new_profile() as prof:
        for ci, c in enumerate(configs):
            if time.time() > DEADLINE:
                errors.append({"family": name, "cfg": ci, "error": "deadline: skipped the rest"})
                break
            fn = None
            try:
                fn = make(c)
                for _ in range(WARM):
                    fn()
                sync()
                for r in range(REPS):
                    if not c.get("hot"):
                        FLUSH.zero_()
                    ctx = f"{name}|{ci}|{r}|{'hot' if c.get('hot') else 'cold'}"
                    cfg_of[ctx] = c
                    with rec.mode(ctx):
                        fn()
                sync()
                done += 1
            except Exception as ex:  # noqa: BLE001 - record and go on (e.g. a backend refusing a config)
                errors.append({"family": name, "cfg": ci, "config": c, "error": repr(ex)[:500]})
            finally:
                del fn
                gc.collect()
    t0 = time.time()
    try:
        att, unatt = attach_kernels(prof, rec, kn)
    except Exception:  # noqa: BLE001 - keep the raw events so the run is not lost
        import traceback
        traceback.print_exc()
        att = unatt = -1
    for o in rec.ops:
        o["cfg"] = cfg_of.get(o["ctx"])
        all_rows.append(o)
    torch.cuda.empty_cache() if not DRY else None
    print(f"{name}: {done}/{len(configs)} configs, {len(rec.ops)} ops, kernel ms {att/1e6:.1f}, unattributed ms {unatt/1e6:.3f}, parse {time.time()-t0:.1f}s", flush=True)


def measure(families, what, stem, script):
    """Run `families` (name -> (configs, make); PH_FAMILIES picks some, in its order) and write
    $OUT/<stem><PH_SUFFIX>.jsonl.gz (a header saying `what`, then one line per op) and $OUT/meta.json for `script`."""
    write_meta(out_dir(), script)
    fams = os.environ.get("PH_FAMILIES", ",".join(families)).split(",")
    all_rows, kn, errors = [], {}, []
    for name in fams:
        cfgs, make = families[name]
        run_family(name, cfgs(), make, all_rows, kn, errors)
    header = {"what": what, "reps": REPS, "warm": WARM, "kernel_names": list(kn),
              "errors": errors, "torch": torch.__version__, "families": fams,
              "device": torch.cuda.get_device_name(0) if not DRY else "cpu"}
    suffix = os.environ.get("PH_SUFFIX", "")
    write_jsonl_gz(f"{out_dir()}/{stem}{suffix}.jsonl.gz", header, all_rows)
    print(f"errors: {len(errors)}")
    for e in errors[:15]:
        print(json.dumps(e)[:300])


def main():
    measure(FAMILIES, "microbenchmarks, one op per line", "micro_ops", __file__)


if __name__ == "__main__":
    main()
