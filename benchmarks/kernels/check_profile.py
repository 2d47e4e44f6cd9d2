"""Does `phantora profile` name the kernel cuBLAS picks, and is it the one the shipped table says?

Writes an ops file of the MoE's forward expert GEMM (bf16 [m, 2048] x [2048, 4096]) at a few row counts m, runs
`phantora profile` on it (the profiler timer), and prints, per m, the kernels the new database entry names beside
the shipped table's kernel (src/phantora/specs/h200/gemm_kernels.json, from data/h200/kernels/gemm_kernels/).

    python -m benchmarks.kernels.check_profile OUT_DIR
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from phantora.models.compute import KernelDatabase
from phantora.models.gemm_kernels import GemmKernelTable
from phantora.models.ops import KernelEstimate, OpCall, TensorMeta
from phantora.profiler.oplog import OpLog, write_ops
from phantora.specs import load_profile

SIZES = (7650, 7968, 8100, 8125, 8336, 8512, 8700)


def forward_gemm(m: int) -> OpCall:
    a = TensorMeta((m, 2048), "bfloat16", (2048, 1))
    b = TensorMeta((2048, 4096), "bfloat16", (4096, 1))
    return OpCall("aten.mm.default", (a, b), (), (TensorMeta((m, 4096), "bfloat16", (4096, 1)),))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    log = OpLog()
    for m in SIZES:
        log.note(forward_gemm(m), KernelEstimate(100_000, 0.0, 0.0, "gemm", "analytic"))
    ops = write_ops(out / "ops.jsonl", log.records(), gpu="h200")
    db_path = out / "profiled.jsonl"
    subprocess.run([sys.executable, "-m", "phantora.cli.main", "profile", str(ops), "--out", str(db_path)], check=True)
    db = KernelDatabase.load(db_path)
    table = load_profile("h200").gemm_kernels.value
    for m in SIZES:
        op = forward_gemm(m)
        entry, _ = db.lookup(op)
        expected = table.kernel("aten.mm", [(t.shape, t.stride, t.dtype) for t in op.tensor_inputs()])
        print(f"m={m}: profiled {list(entry.kernels)}, table {expected}, "
              f"{'same' if expected in entry.kernels else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
