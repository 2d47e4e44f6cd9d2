"""Framework accuracy: Phantora's predictions for the framework programs of examples/ against their real runs.

For each configuration of benchmarks/e2e/frameworks/configs.json and each GPU model with a measured log of it,
data/<gpu>/e2e/frameworks/<name>.log, run the same program with the same arguments under Phantora on that GPU model
(`phantora run` for one GPU, `phantora torchrun` for several) and print measured vs predicted step time (median
after the first 3 steps) and peak memory, the error, and the simulator's own cost. Each row's set is in
benchmarks/e2e/split.toml: held out but for the two TorchTitan configurations whose kernel-level profiles the
sharing fit reads. A configuration measured again on other leases (data/<gpu>/e2e/frameworks/repeats/, and its
runs/<lease>/) is compared by the median of its runs' step times, as the fitting set pools its leases' runs: a
host-bound program's step moves by up to 1.4x between leases, and the host model stands for the average lease
(models/host.md). Peak memory, which does not move, is its own log's.

    python -m benchmarks.e2e.frameworks.accuracy                  # every measured configuration
    python -m benchmarks.e2e.frameworks.accuracy --gpu h200 --only hf_loop_llama1b --json rows.json
    python -m benchmarks.e2e.frameworks.accuracy --rescore rows.json   # print a table from earlier rows
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common.paths import BENCHMARKS, DATA, REPO
from benchmarks.e2e.accuracy import GROUND_TRUTH_HOSTS
from benchmarks.e2e.groundtruth import TT_DATA
from benchmarks.e2e.groundtruth import parse as torchtitan_result

CONFIGS = BENCHMARKS / "e2e" / "frameworks" / "configs.json"


def measured_dir(gpu: str) -> Path:
    """data/<gpu>/e2e/frameworks/: the frameworks' own logs on that GPU model."""
    return DATA / gpu / "e2e" / "frameworks"


def repeat_logs(gpu: str, name: str) -> list[Path]:
    """The configuration's runs on other leases: repeats/<name>.log and repeats/runs/<lease>/<name>.log."""
    repeats = measured_dir(gpu) / "repeats"
    return sorted([*repeats.glob(f"{name}.log"), *repeats.glob(f"runs/*/{name}.log")])


def measured_result(gpu: str, config: dict) -> dict | None:
    """The row's measurement: its own log's, with the step time the median over it and its repeats on other
    leases (`runs`: how many); None where its own log has none."""
    own = measured_dir(gpu) / f"{config['name']}.log"
    result = parse_result(own.read_text(errors="replace"), config) if own.exists() else None
    if result is None:
        return None
    steps = [result["step_s"]]
    for log in repeat_logs(gpu, config["name"]):
        repeat = parse_result(log.read_text(errors="replace"), config)
        if repeat is not None:
            steps.append(repeat["step_s"])
    return {**result, "step_s": statistics.median(steps), "runs": len(steps)}
PHANTORA = [sys.executable, "-m", "phantora.cli.main"]
WARMUP_STEPS = 3
_MEGATRON_LINE = re.compile(r"elapsed time per iteration \(ms\): ([\d.]+).*peak memory \(GiB\): ([\d.]+)"
                            r"(?:.*peak reserved \(GiB\): ([\d.]+))?")


def parse_result(log: str, config: dict) -> dict | None:
    """Median step time (s) and peak memory (GiB) a program printed: the examples' JSON line, Megatron's
    per-iteration lines (median after the first WARMUP_STEPS, as the examples take it), or TorchTitan's per-step
    lines (step time from its tokens/s; memory its peak reserved; it logs no allocated peak)."""
    if config.get("module"):
        found = torchtitan_result(config, log)
        return found and {"step_s": found["step_s_median"], "reserved_gib": found["max_mem_reserved_gib"],
                          "allocated_gib": None}
    for line in log.splitlines():
        if '{"script"' in line:
            found = json.loads(line[line.index('{"script"'):])
            return {"step_s": found["step_s_median"], "reserved_gib": found["max_mem_reserved_gib"],
                    "allocated_gib": found["max_mem_alloc_gib"]}
    iterations = [m.groups() for m in map(_MEGATRON_LINE.search, log.splitlines()) if m]
    if not iterations:
        return None
    steady = [float(ms) / 1e3 for ms, _, _ in iterations][WARMUP_STEPS:] or [float(iterations[-1][0]) / 1e3]
    _, allocated, reserved = iterations[-1]
    return {"step_s": statistics.median_low(steady), "allocated_gib": float(allocated),
            "reserved_gib": float(reserved) if reserved else float("nan")}


def phantora_command(config: dict, gpu: str, out: str, hosts: Sequence[str] = GROUND_TRUTH_HOSTS) -> list[str]:
    head = [*PHANTORA, "run" if config["world"] == 1 else "torchrun", "--gpu", gpu, "--out", out, *hosts]
    target = ["-m", config["script"]] if config.get("module") else [config["script"]]
    if config["world"] == 1:
        return [*head, "--", "python", *target, *config["args"]]
    return [*head, "--nproc-per-node", str(config["world"]), *target, *config["args"]]


def prepare(config: dict) -> None:
    """TorchTitan's rows read the synthetic c4 the measurement made (benchmarks/workloads/torchtitan)."""
    data = Path(TT_DATA) / "data.json"
    if config.get("wheels") == "torchtitan" and not data.exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks/workloads/torchtitan/make_synthetic_c4.py"), str(data)],
                       check=True, capture_output=True)


def simulate(config: dict, gpu: str, hosts: Sequence[str] = GROUND_TRUTH_HOSTS) -> dict:
    """The configuration under Phantora; `hosts`: the host options (by default the ground truth's contended hosts)."""
    prepare(config)
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        done = subprocess.run(phantora_command(config, gpu, out, hosts), capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, **config.get("env", {})})
        wall = time.monotonic() - started
        result = parse_result(done.stdout, config)
        if done.returncode != 0 or result is None:
            lines = [line for line in done.stderr.splitlines() if line.strip()] or ["no output"]
            raise RuntimeError(f"phantora failed (exit {done.returncode}): {lines[-1]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {**result, "wall_s": wall, "rss_gib": summary["simulator_peak_rss_gib"],
            "generic_ops": sum(summary["generic_ops"].values())}


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated configuration names")
    parser.add_argument("--gpu", default="", help="only the measurements of this GPU model (h200, h100)")
    parser.add_argument("--json", type=Path, help="also write the rows here, rewritten after every configuration")
    parser.add_argument("--rescore", type=Path, help="run nothing: print the table of rows written by --json")
    args = parser.parse_args()
    if args.rescore:
        return print_table(json.loads(args.rescore.read_text()))
    only = set(filter(None, args.only.split(",")))
    gpus = [args.gpu] if args.gpu else sorted(p.name for p in DATA.iterdir() if measured_dir(p.name).is_dir())
    rows = []
    for gpu in gpus:
        for config in json.loads(CONFIGS.read_text())["configs"]:
            if only and config["name"] not in only:
                continue
            log = measured_dir(gpu) / f"{config['name']}.log"
            measured = measured_result(gpu, config)
            if measured is None:
                reason = "failed on the GPU" if log.exists() else "not measured"
                print(f"{config['name']} ({gpu}): no measurement ({reason}: {log.relative_to(REPO)})", flush=True)
                continue
            rows.append(compare(config, gpu, measured))
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    return print_table(rows)


def compare(config: dict, gpu: str, measured: dict) -> dict:
    row = {"name": config["name"], "gpu": gpu, "measured": measured, "predicted": None}
    try:
        row["predicted"] = predicted = simulate(config, gpu)
    except RuntimeError as error:
        print(f"{config['name']} ({gpu}): FAILED: {error}", flush=True)
        return row
    print(f"{config['name']} ({gpu}): step {1e3 * predicted['step_s']:.1f} ms vs {1e3 * measured['step_s']:.1f} "
          f"({error_pct(predicted['step_s'], measured['step_s']):+.1f} %), {predicted['wall_s']:.0f} s wall", flush=True)
    return row


def optional_error(predicted: float | None, measured: float | None) -> str:
    """The error where both sides were logged (TorchTitan logs no allocated peak)."""
    return "-" if predicted is None or measured is None else f"{error_pct(predicted, measured):+.1f}"


def print_table(rows: list[dict]) -> int:
    header = (f"{'config':<36} {'gpu':>4} {'step ms meas':>12} {'pred':>8} {'err %':>7}   "
              f"{'reserved GiB meas':>17} {'pred':>7} {'err %':>7}   {'alloc err %':>11}   {'sim s':>6}")
    print(header)
    print("-" * len(header))
    step_errors = []
    for row in rows:
        m, p = row["measured"], row["predicted"]
        if p is None:
            print(f"{row['name']:<36} {row['gpu']:>4} {1e3 * m['step_s']:>12.1f} {'failed':>8}")
            continue
        step = error_pct(p["step_s"], m["step_s"])
        step_errors.append(abs(step))
        print(f"{row['name']:<36} {row['gpu']:>4} {1e3 * m['step_s']:>12.1f} {1e3 * p['step_s']:>8.1f} {step:>+7.1f}   "
              f"{m['reserved_gib']:>17.2f} {p['reserved_gib']:>7.2f} {error_pct(p['reserved_gib'], m['reserved_gib']):>+7.1f}   "
              f"{optional_error(p['allocated_gib'], m['allocated_gib']):>11}   {p['wall_s']:>6.0f}")
    if step_errors:
        print(f"step time |error|: mean {statistics.mean(step_errors):.1f} %, max {max(step_errors):.1f} % "
              f"over {len(step_errors)} configurations; {sum(r['predicted'] is None for r in rows)} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
