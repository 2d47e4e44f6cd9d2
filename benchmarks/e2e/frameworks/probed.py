"""Host-bound framework rows compared at the host speed they ran at: each program of
data/<gpu>/e2e/frameworks/probed/ (`PROBE_STEPS=1 groundtruth.sh`: a host-speed probe after every optimizer step,
benchmarks/host/probe_steps.py) simulated with every rank on a host as slow as the slowest rank's probes said
(`--host-contention none --host-time-scale` its median probe over the uncontended hosts' probe), against rank 0's
median step host time (optimizer step to optimizer step, the probe left out).

    python -m benchmarks.e2e.frameworks.probed [--gpu h200] [--only A,B] [--json ROWS] [--lease LEASE]

`--lease` reads a rerun on another lease instead (probed/runs/LEASE/).

The framework benchmark (accuracy.py) compares the same programs' unprobed runs with the mean contended host
(`--host-contention h200-vm`): right on average over leases, but a host-bound row's one run sits wherever its lease's
hosts were. Here both sides run at one known speed, so what is left is the host model's own error. The probe is a
pure-Python loop: Python slows down with a contended host more than kernel launches do (1.7x against 1.4x,
models/host_contention.py), so the scale slightly over-states the slowdown of the rest of the host's work.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.common.paths import DATA
from benchmarks.e2e.frameworks.accuracy import CONFIGS, WARMUP_STEPS, error_pct, simulate
from benchmarks.host.fit_contention import uncontended_probe_us


def probed_dir(gpu: str, lease: str | None = None) -> Path:
    probed = DATA / gpu / "e2e" / "frameworks" / "probed"
    return probed / "runs" / lease if lease else probed


def host_scale(probes_per_rank: list[list[float]]) -> float:
    """How much slower than uncontended the slowest rank's host was: its median probe over the uncontended one."""
    return max(statistics.median(p) for p in probes_per_rank) / uncontended_probe_us()


def at_host_scale(scale: float) -> tuple[str, ...]:
    """Phantora's host options for every rank on a host `scale` times as slow as an uncontended one."""
    return ("--host-contention", "none", "--host-time-scale", f"{scale:.3f}")


def compare(config: dict, gpu: str, records: list[dict]) -> dict:
    steady = records[0]["step_host_s"][WARMUP_STEPS - 1:]  # the first entry is the second step
    measured_s = statistics.median(steady)
    scale = host_scale([r["python_loop_probe_us"][WARMUP_STEPS:] for r in records])
    predicted_s = simulate(config, gpu, at_host_scale(scale))["step_s"]
    print(f"{config['name']:32s} host {scale:.2f}x uncontended  measured {1e3 * measured_s:7.1f} ms  simulated "
          f"{1e3 * predicted_s:7.1f} ms ({error_pct(predicted_s, measured_s):+.1f} %)", flush=True)
    return {"name": config["name"], "gpu": gpu, "host_scale": scale, "measured_step_s": measured_s,
            "predicted_step_s": predicted_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200")
    p.add_argument("--only", default="", help="comma-separated configuration names")
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--lease", help="the programs run again on this lease (probed/runs/LEASE/)")
    a = p.parse_args()
    only = set(filter(None, a.only.split(",")))
    rows = []
    for config in json.loads(CONFIGS.read_text())["configs"]:
        paths = sorted(probed_dir(a.gpu, a.lease).glob(f"{config['name']}.probed.rank*.json"))
        if not paths or only and config["name"] not in only:
            continue
        rows.append(compare(config, a.gpu, [json.loads(path.read_text()) for path in paths]))
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1) + "\n")
    errors = [abs(error_pct(r["predicted_step_s"], r["measured_step_s"])) for r in rows]
    if errors:
        print(f"step time |error|: mean {statistics.mean(errors):.1f} %, max {max(errors):.1f} % over {len(rows)}")


if __name__ == "__main__":
    main()
