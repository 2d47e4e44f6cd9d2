"""Accuracy benchmark: Phantora's predictions against real H200 runs.

For every configuration of `benchmarks/e2e/configs.json` (the dev set,
`data/h200/e2e/dev_set/h200x4_dev_set.json`, and our own H200 ground truth, `data/h200/e2e/groundtruth/`)
it runs the same command under Phantora (`phantora run -- python3 SCRIPT ARGS` for one GPU,
`phantora torchrun TORCHRUN-ARGS SCRIPT ARGS` for several), reads the script's own JSON result line
(its median step time and peak memory, in simulated time), and prints measured vs predicted with
the error, plus the simulator's own cost.

    python -m benchmarks.e2e.accuracy                 # all single-GPU configs
    python -m benchmarks.e2e.accuracy --all           # also the multi-GPU ones (phantora torchrun)
    python -m benchmarks.e2e.accuracy --only llama_l1b_tp2,moe_ep4
    python -m benchmarks.e2e.accuracy --no-kernel-db  # analytic cost model only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.paths import BENCHMARKS, REPO
from benchmarks.e2e import groundtruth
from benchmarks.e2e.report import load_split

CONFIGS = BENCHMARKS / "e2e" / "configs.json"
PHANTORA = [sys.executable, "-m", "phantora.cli.main"]


def measured(config: dict, gpu: str = "h200") -> dict:
    """The measurement to compare with: on the H200 the dev set's where the config is one of it, else ours; on
    another GPU model the run that `benchmarks/e2e/split.toml` names for it (the script's own JSON line)."""
    if gpu != GPU:
        found = other_gpu_run(config, gpu)
        return {"step_ms": 1e3 * found["step_s_median"], "max_mem_reserved_gib": found["max_mem_reserved_gib"],
                "max_mem_allocated_gib": found["max_mem_alloc_gib"]}
    if config["reference"] == "dev_set":
        return config["dev_set"]
    m = config["measured"]
    return {"step_ms": m["step_ms"]["median"], "max_mem_reserved_gib": m["max_mem_reserved_gib"],
            "max_mem_allocated_gib": m["max_mem_allocated_gib"]}


def other_gpu_run(config: dict, gpu: str) -> dict:
    """The JSON line of the run on `gpu` that split.toml names as this configuration's source."""
    source = REPO / load_split()[(config["name"], gpu)]["source"]
    return result_line(config, source.read_text())


def ground_truth_steps(config: dict) -> int:
    """How many steps the ground-truth command ran: the simulated median is then taken over the same steps.
    Host-bound multi-rank steps vary from step to step in the simulation too (the contended hosts' places
    rotate), so a median over 3 steps would be a draw."""
    words, flag = config["args"], config["steps_flag"]
    return int(words[words.index(flag) + 1])


def torchrun_available() -> bool:
    done = subprocess.run([*PHANTORA, "torchrun", "--help"], capture_output=True, text=True, cwd=REPO)
    return done.returncode == 0


def skip_reason(config: dict, have_torchrun: bool) -> str | None:
    if config["world"] > 1 and not have_torchrun:
        return "needs phantora torchrun"
    if config["module"]:
        try:
            import torchtitan  # noqa: F401
        except ImportError:
            return "needs torchtitan 0.2.2 installed (benchmarks/workloads/torchtitan/README.md)"
    return None


GPU = "h200"
"""The GPU the fitting set's configurations ran on and are simulated on by default; each row names its GPU. `--gpu`
simulates those split.toml lists for another GPU model (llama_l1b_ac_1gpu is also the H100's), against that run."""
GROUND_TRUTH_HOSTS = ("--host-contention", "h200-vm")
"""The hosts the ground truth ran on: the lent H200 VMs, whose CPUs are contended (models/host_contention.py)."""


def phantora_command(config: dict, out: str, steps: int, extra: list[str], gpu: str = GPU) -> list[str]:
    launch, args = config["launch"], [*config["args"], config["steps_flag"], str(steps)]
    head = ["--gpu", gpu, "--out", out, *GROUND_TRUTH_HOSTS, *extra]
    if config["world"] == 1:
        return [*PHANTORA, "run", *head, "--", *launch, *args]
    assert launch[0] == "torchrun", launch
    return [*PHANTORA, "torchrun", *head, *launch[1:], *args]


def result_line(config: dict, stdout: str) -> dict:
    """The script's own JSON result line (rank 0's; ranks may be prefixed), or TorchTitan's step logs."""
    if config["module"]:
        result = groundtruth.parse({**config, "module": True}, stdout)
        if result is None:
            raise StopIteration
        return result
    return next(json.loads(line[line.index('{"script"'):]) for line in stdout.splitlines() if '{"script"' in line)


def ensure_torchtitan_data(config: dict) -> None:
    """TorchTitan's configurations read a synthetic C4 dataset: make it once."""
    if config["module"] and not Path(groundtruth.TT_DATA, "data.json").exists():
        Path(groundtruth.TT_DATA).mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(REPO / groundtruth.TT / "make_synthetic_c4.py"),
                        f"{groundtruth.TT_DATA}/data.json"], check=True)


def run_config(config: dict, *, steps: int, extra: list[str], gpu: str = GPU) -> dict:
    ensure_torchtitan_data(config)
    with tempfile.TemporaryDirectory() as out:
        command = phantora_command(config, out, steps, extra, gpu)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"{config['name']}: phantora failed:\n{done.stderr[-3000:]}")
        result = result_line(config, done.stdout + (done.stderr if config["module"] else ""))
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"result": result, "summary": summary, "wall_s": wall}


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0,
                        help="steps per run (default: as many as the ground truth ran; the scripts' median skips 3)")
    parser.add_argument("--no-kernel-db", action="store_true", help="analytic compute model only")
    parser.add_argument("--no-power-cap", action="store_true", help="GPUs never slowed by their power limit")
    parser.add_argument("--all", action="store_true", help="also multi-GPU configs (phantora torchrun)")
    parser.add_argument("--only", default="", help="comma-separated config names (any world size)")
    parser.add_argument("--gpu", default=GPU, help="the GPU model: another than the H200 runs the configurations "
                                                  "split.toml lists for it, against their runs there")
    parser.add_argument("--json", type=Path, help="also write the rows here, rewritten after every config")
    parser.add_argument("--rescore", type=Path, nargs="+", metavar="ROWS",
                        help="run nothing: print the table for rows written by --json earlier, against the "
                             "measurements in accuracy_configs.json now (later files win for a config)")
    args = parser.parse_args()
    doc = json.loads(CONFIGS.read_text())
    if args.rescore:
        return print_table(rescored(args.rescore, doc), doc, args.no_kernel_db)
    only = set(filter(None, args.only.split(",")))
    configs = ([c for c in doc["configs"] if c["name"] in only] if only
               else [c for c in doc["configs"] if args.all or c["world"] == 1])
    if args.gpu != GPU:
        listed = {name for name, gpu in load_split() if gpu == args.gpu}
        configs = [c for c in configs if c["name"] in listed]
    extra = ["--no-kernel-db"] * args.no_kernel_db + ["--no-power-cap"] * args.no_power_cap
    have_torchrun = any(c["world"] > 1 for c in configs) and torchrun_available()
    rows, failed = [], []
    for config in configs:
        reason = skip_reason(config, have_torchrun)
        if reason:
            print(f"{config['name']}: skipped: {reason}")
            continue
        try:
            steps = args.steps or ground_truth_steps(config)
            run = run_config(config, steps=steps, extra=extra, gpu=args.gpu)
        except (RuntimeError, StopIteration) as error:  # one failed config is reported, the others go on
            lines = [line for line in str(error).splitlines() if line.strip()] or [repr(error)]
            print(f"{config['name']}: FAILED: {lines[0]} ... {lines[-1]}", flush=True)
            failed.append(config["name"])
            continue
        r, m = run["result"], measured(config, args.gpu)
        rows.append({
            "name": config["name"],
            "gpu": args.gpu,
            "spread_ms": spread(config) if args.gpu == GPU else (float("nan"), float("nan")),
            "step_ms": (m["step_ms"], 1e3 * r["step_s_median"]),
            "reserved_gib": (m["max_mem_reserved_gib"], r["max_mem_reserved_gib"]),
            "allocated_gib": (m["max_mem_allocated_gib"], r.get("max_mem_alloc_gib")),
            "wall_s_per_step": run["wall_s"] / steps,
            "rss_gib": run["summary"]["simulator_peak_rss_gib"],
            "generic_ops": run["summary"]["generic_ops"],
        })
        (ms, ps), (mr, pr) = rows[-1]["step_ms"], rows[-1]["reserved_gib"]
        print(f"{config['name']}: step {ps:.1f} ms vs {ms:.1f} ({error_pct(ps, ms):+.1f} %), reserved {pr:.2f} GiB "
              f"vs {mr:.2f} ({error_pct(pr, mr):+.1f} %), {run['wall_s']:.0f} s wall", flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    code = print_table(rows, doc, args.no_kernel_db)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return code or (1 if failed else 0)


def spread(config: dict) -> tuple[float, float]:
    """Min and max step time of every real step measured (all calls; the dev set's are not published)."""
    m = config.get("measured") or config.get("remeasured")
    return (m["step_ms"]["min"], m["step_ms"]["max"]) if m else (float("nan"), float("nan"))


def rescored(paths: list[Path], doc: dict) -> list[dict]:
    """Rows of earlier runs with the measured side taken again from the configurations."""
    by_name = {c["name"]: c for c in doc["configs"]}
    rows: dict[str, dict] = {}
    for path in paths:
        for row in json.loads(path.read_text()):
            config = by_name[row["name"]]
            m = measured(config)
            rows[row["name"]] = {**row, "spread_ms": spread(config), "step_ms": (m["step_ms"], row["step_ms"][1]),
                                 "reserved_gib": (m["max_mem_reserved_gib"], row["reserved_gib"][1]),
                                 "allocated_gib": (m["max_mem_allocated_gib"], row["allocated_gib"][1])}
    order = [c["name"] for c in doc["configs"]]
    return sorted(rows.values(), key=lambda r: order.index(r["name"]))


def print_table(rows: list[dict], doc: dict, no_kernel_db: bool) -> int:
    if not rows:
        print("no configuration ran")
        return 0
    print(f"hardware: {doc['hardware']}")
    print(f"cost model: {'analytic only' if no_kernel_db else 'measured database + analytic'}")
    header = f"{'config':<26} {'step ms meas':>12} {'min-max':>13} {'pred':>8} {'err %':>7}   {'reserved GiB meas':>17} " \
             f"{'pred':>7} {'err %':>7}   {'alloc err %':>11}   {'sim s/step':>10} {'RSS GiB':>7}"
    print(header)
    print("-" * len(header))
    step_errors, mem_errors = [], []
    for row in rows:
        (ms, ps), (mr, pr), (ma, pa) = row["step_ms"], row["reserved_gib"], row["allocated_gib"]
        step_errors.append(error_pct(ps, ms))
        mem_errors.append(error_pct(pr, mr))
        alloc_err = f"{error_pct(pa, ma):>+11.1f}" if ma is not None and pa is not None else f"{'-':>11}"
        lo, hi = row.get("spread_ms", (float("nan"), float("nan")))
        print(f"{row['name']:<26} {ms:>12.1f} {f'{lo:.0f}-{hi:.0f}':>13} {ps:>8.1f} {step_errors[-1]:>+7.1f}   "
              f"{mr:>17.2f} {pr:>7.2f} "
              f"{mem_errors[-1]:>+7.1f}   {alloc_err}   {row['wall_s_per_step']:>10.2f} "
              f"{row['rss_gib']:>7.2f}")
        if row["generic_ops"]:
            print(f"{'':<26} unmodelled ops: {row['generic_ops']}")
    mean = lambda xs: sum(abs(x) for x in xs) / len(xs)  # noqa: E731
    print("-" * len(header))
    print(f"step time |error|: mean {mean(step_errors):.1f} %, max {max(abs(e) for e in step_errors):.1f} %;  "
          f"peak reserved |error|: mean {mean(mem_errors):.1f} %, max {max(abs(e) for e in mem_errors):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
