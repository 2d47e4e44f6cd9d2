"""Compare the GPU runs' measurements with the shipped H200 database (run anywhere:
`python -m benchmarks.kernels.profile_check.compare > data/h200/kernels/profile_check/comparison.txt`).

Shipped entries for the llama ops are in-step measurements (origin llama_step); where the shipped
microbenchmarks (data/h200/kernels/micro/sweeps/micro_ops.jsonl.gz, cold L2, same method as `phantora profile`)
measured the same signature, that is compared too. Ops the shipped database lacks are compared with
the analytic model."""

import gzip
import json
import statistics
from pathlib import Path

from phantora.models.compute import ComputeModel, KernelDatabase
from phantora.models.opcall import decode_op, signature
from phantora.profiler.oplog import read_ops
from phantora.specs import get_gpu_spec
from phantora.specs import load_profile

ROOT = Path(__file__).resolve().parents[3]
CHECK = ROOT / "data" / "h200" / "kernels" / "profile_check"
"""The validation's data (this script's output goes beside it)."""
run1 = KernelDatabase.load(CHECK / "gpu_run" / "llama_profiler.jsonl")
run2 = KernelDatabase.load(CHECK / "gpu_run2" / "llama_profiler.jsonl")
events = KernelDatabase.load(CHECK / "gpu_run" / "llama_events.jsonl")
shipped = load_profile("h200").kernels.value
ops = read_ops(CHECK / "ops_llama3b_l2.jsonl").records
analytic = ComputeModel(get_gpu_spec("h200"), KernelDatabase("h200"), load_profile("h200").calibration.value)

micro: dict[str, list[int]] = {}
with gzip.open(ROOT / "data/h200/kernels/micro/sweeps/micro_ops.jsonl.gz", "rt") as f:
    f.readline()
    for line in f:
        r = json.loads(line)
        if "k" not in r or not r["ctx"].endswith("|cold"):
            continue
        try:
            sig = signature(decode_op(r))
        except Exception:  # noqa: BLE001 - records of ops this torch cannot describe
            continue
        if sig in run1.entries:
            micro.setdefault(sig, []).append(sum(k[2] for k in r["k"]))


def pct(a: float, b: float) -> float:
    return (a / b - 1) * 100


def summary(name: str, errs: list[float]) -> str:
    if not errs:
        return f"{name}: none"
    a = sorted(abs(e) for e in errs)
    return (f"{name}: n={len(a)}, median |err| {statistics.median(a):.1f}%, p90 {a[int(0.9 * (len(a) - 1))]:.1f}%, "
            f"max {a[-1]:.1f}%")


print(f"{'op':48s} {'profile us':>10s} {'k':>3s} {'shipped us':>10s} {'err%':>6s} {'micro us':>9s} {'err%':>6s} "
      f"{'events us':>9s} {'run2 %':>7s} {'analytic us':>11s}")
in_step, in_step_big, vs_micro, vs_events, vs_run2, vs_analytic = [], [], [], [], [], []
for sig, e in sorted(run1.entries.items(), key=lambda kv: -kv[1].kernel_ns):
    op = decode_op(ops[sig])
    s = shipped.entries.get(sig)
    m = statistics.median(micro[sig]) if sig in micro else None
    v = events.entries.get(sig)
    r2 = run2.entries[sig]
    an = analytic.analytic(op).duration_ns - analytic.cal.kernel_gap_ns * 1  # without one kernel gap
    if s:
        in_step.append(pct(e.kernel_ns, s.kernel_ns))
        if e.kernel_ns >= 100_000:
            in_step_big.append(pct(e.kernel_ns, s.kernel_ns))
    else:
        vs_analytic.append(pct(an, e.kernel_ns))
    if m:
        vs_micro.append(pct(e.kernel_ns, m))
    if v:
        vs_events.append(pct(v.kernel_ns, e.kernel_ns))
    vs_run2.append(pct(r2.kernel_ns, e.kernel_ns))
    print(f"{op.name[:48]:48s} {e.kernel_ns / 1e3:10.1f} {e.n_kernels:3d} "
          f"{(s.kernel_ns / 1e3 if s else float('nan')):10.1f} {(pct(e.kernel_ns, s.kernel_ns) if s else float('nan')):6.1f} "
          f"{(m / 1e3 if m else float('nan')):9.1f} {(pct(e.kernel_ns, m) if m else float('nan')):6.1f} "
          f"{(v.kernel_ns / 1e3 if v else float('nan')):9.1f} {pct(r2.kernel_ns, e.kernel_ns):7.1f} {an / 1e3:11.1f}")
print()
print(summary("profile vs shipped in-step entries, all", in_step))
print(summary("profile vs shipped in-step entries, ops >= 100 us", in_step_big))
print(summary("profile vs shipped cold microbenchmarks (same method)", vs_micro))
print(summary("CUDA-events timer vs profiler timer (40 heaviest ops)", vs_events))
print(summary("second GPU call vs first (run-to-run)", vs_run2))
print(summary("analytic model vs profile, ops the shipped database lacks", vs_analytic))
total = sum(run1.entries[s].kernel_ns * ops[s]["calls"] for s in run1.entries)
covered = sum(shipped.entries[s].kernel_ns * ops[s]["calls"] for s in run1.entries if s in shipped.entries)
mine = sum(run1.entries[s].kernel_ns * ops[s]["calls"] for s in run1.entries if s in shipped.entries)
print(f"simulated run's kernel time over the shipped signatures: profile {mine / 1e6:.1f} ms vs shipped {covered / 1e6:.1f} ms "
      f"({pct(mine, covered):+.1f}%); all signatures, profile: {total / 1e6:.1f} ms")
