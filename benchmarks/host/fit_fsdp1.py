"""Fit the host cost of FSDP1's hooks beyond the ops they issue (models/host.py LIBRARY_CALL_NS, FSDP1's entries)
at the average lease.

FSDP1 (`FullyShardedDataParallel`, what Accelerate's and Lightning's FSDP wrap a model in) runs Python in every
unit's forward and backward: casting and gathering the flat parameter, making each original parameter a view of it
(`use_orig_params`), registering the backward hooks, resharding. Phantora charges the ops it issues; this fits
what the Python around them costs, per call of each hook.

Real side (data/h200/host/fsdp1/): the 1.5B llama under `llama_train.py --parallel fsdp1` on 2 and 4 GPUs, each
hook's exclusive host time (benchmarks/workloads/host_calls.py), the host's waits for the GPU (`Event.synchronize`,
FSDP1's limit on all-gathers in flight) apart, so a hook's time is its own host work. The lease ran the
ground-truth command `llama_l1b_fsdp2` twice beside them: its FSDP2 calls against the same command's on the indexed
leases give the lease's index (benchmarks/host/leases.py), which divides the real times.

Simulated side: the same commands under Phantora with every rank at the mean host, their own call times.

    new = current + (real µs per step / lease index - simulated µs per step) / simulated calls per step

per hook, pooled over the runs and ranks. Writes `library_call_ns` (its FSDP1 entries refitted, the others kept) to
src/phantora/specs/<gpu>/host.json (benchmarks/common/fitted.py).

    python -m benchmarks.host.fit_fsdp1 [--specs DIR]     # two simulations, about two minutes on two cores
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.common.fitted import update_fitted
from benchmarks.common.paths import SPECS, data_dir
from benchmarks.host import fit_fsdp, leases
from benchmarks.host.fit_dtensor import at_mean_host

GPU = "h200"
MEASURED = data_dir(GPU, "host", "fsdp1")
FSDP1 = ("fully_sharded_data_parallel.", "_runtime_utils.")
"""The FSDP1 hooks' names (host_calls.py: the module's last component, then the function)."""
RUNS = {"fsdp1_l1b_2gpu": 2, "fsdp1_l1b_4gpu": 4}
"""FSDP1 run -> ranks; each runs fit_fsdp's 1.5B llama arguments with `--parallel fsdp1`."""
INDEX_RUNS = ("llama_l1b_fsdp2", "llama_l1b_fsdp2_again")
"""This lease's runs of the ground-truth command whose FSDP2 calls give its index."""


def fsdp1_args() -> list[str]:
    """fit_fsdp's 1.5B llama command, FSDP1 in place of FSDP2."""
    args = list(fit_fsdp.RUNS["llama_l1b_fsdp2"][0])
    args[args.index("--parallel") + 1] = "fsdp1"
    return args


def lease_index() -> float:
    """This lease's index, from its runs of the ground-truth command (benchmarks/host/fit_fsdp.py)."""
    lease = json.loads((MEASURED / "meta.json").read_text())["lease"]
    return fit_fsdp.estimated_index(lease, leases.lease_index(),
                                    [(MEASURED / run, "llama_l1b_fsdp2") for run in INDEX_RUNS])


def simulated(run: str, out: str) -> fit_fsdp.Totals:
    calls = Path(out) / run / "calls"
    at_mean_host("llama_train.py", RUNS[run], fsdp1_args(), str(Path(out) / run / "run"),
                 PHANTORA_BENCH_HOST_CALLS=str(calls))
    return fit_fsdp.call_totals(calls, 1, FSDP1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, default=SPECS, help="where the specs/<gpu>/ folders are (a copy: dry run)")
    args = p.parse_args()
    index = lease_index()
    real: dict[str, float] = {}
    sim: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as out:
        for run in RUNS:
            for (name, _), (us, _) in fit_fsdp.call_totals(MEASURED / run, 1, FSDP1).items():
                real[name] = real.get(name, 0.0) + us / index
            for (name, _), (us, n) in simulated(run, out).items():
                entry = sim.setdefault(name, [0.0, 0.0])
                entry[0] += us
                entry[1] += n
    current = fit_fsdp.H200_HOST.library_call_ns
    print(f"{'call':48} {'real/index':>10} {'simulated':>10}  µs per call   constant: now -> fitted")
    fitted: dict[str, int] = {}
    for name, (sim_us, n) in sorted(sim.items()):
        now = current.get(name, 0)
        fitted[name] = max(round((now / 1e3 + (real.get(name, 0.0) - sim_us) / n) * 10) * 100, 0)  # to 0.1 µs, ns
        print(f"{name:48} {real.get(name, 0.0) / n:10.1f} {sim_us / n:10.1f}               "
              f"{now / 1e3:7.1f} -> {fitted[name] / 1e3:7.1f}")
    constants = {"library_call_ns": {**current, **fitted}}
    sources = dict.fromkeys(constants, fit_fsdp.LIBRARY_CALL_SOURCE)
    print(f"wrote {update_fitted(GPU, 'host', constants, sources, specs_root=args.specs)}")


if __name__ == "__main__":
    main()
