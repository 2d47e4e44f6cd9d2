"""Store the ground-truth runs in the repo and build benchmarks/e2e/configs.json.

A run is named LEASE/RUN: the machine lease it ran on (`<date>-<NN>`, the NNth lease of that day; data/README.md)
and the run within that lease (`g1`, `r2t`, ... or nothing).

    # the first measurement of the configurations: unpack what benchmarks/e2e/groundtruth.py returned
    python -m benchmarks.e2e.collect import LEASE/RUN groundtruth.tar.gz [--runner-log LOG]
    # a later lease that measures configurations again: kept beside the first runs, under runs/LEASE/
    python -m benchmarks.e2e.collect import LEASE/RUN TAR --repeat
    # a run of a configuration's exact command taken by another script (profile_steps.py --timeline or
    # its profiles: the same steps with marks, or with one profiled step after them), from its log
    python -m benchmarks.e2e.collect import-log LEASE/RUN NAME LOG --note "how it ran"
    # rebuild the configs file from data/h200/e2e/groundtruth/ and the dev set
    python -m benchmarks.e2e.collect configs

`import` writes data/h200/e2e/groundtruth/NAME.json (+ logs/NAME.log), data/h200/collectives/overlap/*, and
runs/LEASE/env[_RUN].json; TorchTitan's result is re-parsed from its log with groundtruth.parse.
`configs` lists every configuration (name, script, world, args as CLI words, measured step_ms
median and spread, peak memory, source file), the three dev-set configurations first. A configuration
measured on several leases (runs/LEASE/NAME[_RUN].json) gets the median and spread of all its steps
together, and `runs` lists each run's median: host-bound runs (tensor parallelism, tiny models) differ
between leases by more than within one. Its peak memory is the median of the runs' peaks (one command's
peak reserved memory differs between runs by up to 10 %).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import statistics
import tarfile
from pathlib import Path

from benchmarks.common.paths import BENCHMARKS, REPO, data_dir
from benchmarks.e2e import groundtruth

GPU = "h200"
GT = data_dir(GPU, "e2e", "groundtruth")
RUNS = GT / "runs"
"""Runs after the first, by lease: runs/LEASE/NAME[_RUN].json, their logs, env[_RUN].json, runner.log."""
OVERLAP = data_dir(GPU, "collectives", "overlap")
DEV_SET = data_dir(GPU, "e2e", "dev_set", "h200x4_dev_set.json")
CONFIGS = BENCHMARKS / "e2e" / "configs.json"
FIRST_ENV = RUNS / "2026-11-21-01" / "env.json"
"""The environment of the first ground-truth lease: the hardware line of configs.json."""


def split_run(run: str) -> tuple[str, str]:
    """`2026-11-22-24/g1` -> (`2026-11-22-24`, `_g1`); `2026-11-21-01` -> (`2026-11-21-01`, ``)."""
    lease, _, within = run.partition("/")
    return lease, f"_{within}" if within else ""


def import_run(tag: str, tar_path: Path, runner_log: Path | None, exclude: set[str], repeat: bool = False):
    by_name = {c["name"]: c for c in groundtruth.CONFIGS}
    with tarfile.open(tar_path) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    lease, within = split_run(tag)
    lease_dir = RUNS / lease
    lease_dir.mkdir(parents=True, exist_ok=True)
    (GT / "logs").mkdir(exist_ok=True)
    for name, data in sorted(files.items()):
        folder, base = name.split("/", 1) if "/" in name else ("", name)
        if name == "env.json":
            (lease_dir / f"env{within}.json").write_bytes(data)
        elif folder == "overlap":
            OVERLAP.mkdir(parents=True, exist_ok=True)
            (OVERLAP / base).write_bytes(data)
        elif folder == "groundtruth" and base.endswith(".json"):
            rec = json.loads(data)
            log = files.get(f"logs/{rec['name']}.log", b"").decode(errors="replace")
            if rec["name"] in by_name and by_name[rec["name"]]["module"] and log:
                result = groundtruth.parse(by_name[rec["name"]], log)  # TorchTitan: one value per step
                rec["result"] = result
                rec["step_ms_all"] = [1e3 * t for t in result["step_s_all"]]
                rec["step_ms"] = groundtruth.spread(rec["step_ms_all"][3:])
                rec["max_mem_reserved_gib"] = result["max_mem_reserved_gib"]
                rec["max_mem_allocated_gib"] = None
            rec["run"] = tag
            dest = GT / "excluded" / "runs" / lease if rec["name"] in exclude else lease_dir if repeat else GT
            suffix = within if rec["name"] in exclude or repeat else ""
            write_record(dest, f"{rec['name']}{suffix}", rec, log)
        elif folder == "groundtruth":
            (lease_dir / f"{Path(base).stem}{within}{Path(base).suffix}").write_bytes(data)
    if runner_log:
        (lease_dir / "runner.log").write_bytes(runner_log.read_bytes())


def write_record(dest: Path, stem: str, rec: dict, log: str) -> None:
    """dest/STEM.json (the record) and dest/logs/STEM.log (the run's output)."""
    (dest / "logs").mkdir(parents=True, exist_ok=True)
    (dest / f"{stem}.json").write_text(json.dumps(rec, indent=1) + "\n")
    (dest / "logs" / f"{stem}.log").write_text(log)


def import_log(tag: str, name: str, log_path: Path, note: str) -> None:
    """A repeat from the log of a run of `name`'s command (its script's JSON line), kept under runs/LEASE/."""
    c = next((cfg for cfg in groundtruth.CONFIGS if cfg["name"] == name), None)
    if c is None:
        raise SystemExit(f"unknown configuration {name!r} (benchmarks/e2e/groundtruth.py CONFIGS)")
    log = log_path.read_text(errors="replace")
    result = groundtruth.parse(c, log)
    if result is None:
        raise SystemExit(f"{log_path}: no result line of {c['script']}")
    steps = [1e3 * t for t in result["step_s_all"]]
    rec = {"name": name, "script": c["script"], "world": c["world"], "args": c["args"],
           "command": " ".join(groundtruth.command_words(c)), "ok": True, "note": note, "run": tag,
           "step_ms_all": steps, "step_ms_warmup_excluded": 3, "step_ms": groundtruth.spread(steps[3:]),
           "max_mem_allocated_gib": result.get("max_mem_alloc_gib"),
           "max_mem_reserved_gib": result.get("max_mem_reserved_gib"), "result": result}
    lease, within = split_run(tag)
    write_record(RUNS / lease, f"{name}{within}", rec, log)


def median_of(values) -> float | None:
    """Median of the values that were measured (a script may not report one)."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def build_configs():
    dev = json.loads(DEV_SET.read_text())
    out = []
    recs = {p.stem: json.loads(p.read_text()) for p in sorted(GT.glob("*.json"))}
    order = [c["name"] for c in groundtruth.CONFIGS]
    by_name = {c["name"]: c for c in groundtruth.CONFIGS}

    repeats: dict[str, list[dict]] = {}
    for p in sorted(RUNS.glob("*/*.json")):
        if p.name.startswith("env"):
            continue
        rec = json.loads(p.read_text())
        if rec.get("ok"):
            repeats.setdefault(rec["name"], []).append(rec)

    def entry(rec):
        c = by_name[rec["name"]]
        words = groundtruth.command_words(c)
        runs = [rec, *repeats.get(rec["name"], [])]
        steps = [x for r in runs for x in r["step_ms_all"][3:]]
        step_ms = groundtruth.spread(steps) if len(runs) > 1 else rec["step_ms"]
        return {
            "name": rec["name"], "script": c["script"], "module": c["module"], "world": rec["world"],
            "launch": words[:len(words) - len(c["args"])], "args": rec["args"], "command": rec["command"],
            "steps_flag": "--training.steps" if c["module"] else "--steps",
            "measured": {
                "step_ms": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in step_ms.items()},
                "runs": [{"run": r.get("run"), "median_ms": round(r["step_ms"]["median"], 3),
                          "min_ms": round(r["step_ms"]["min"], 3), "max_ms": round(r["step_ms"]["max"], 3),
                          "max_mem_reserved_gib": r["max_mem_reserved_gib"]}
                         for r in runs],
                "step_ms_all": [round(x, 3) for x in rec["step_ms_all"]], "warmup_steps_excluded": 3,
                # the peak reserved memory of one command differs between runs (data/h200/memory/history)
                "max_mem_reserved_gib": median_of(r["max_mem_reserved_gib"] for r in runs),
                "max_mem_allocated_gib": median_of(r["max_mem_allocated_gib"] for r in runs),
                "date": datetime.datetime.fromtimestamp(rec["started_unix"], datetime.timezone.utc).date().isoformat(),
                "cuda_visible_devices": rec["cuda_visible_devices"], "concurrent_with": rec["concurrent_with"],
                "source": str((GT / f"{rec['name']}.json").relative_to(REPO)),
            },
            "note": rec.get("note", ""),
        }

    for d in dev["configs"]:
        rec = recs.get(d["name"])
        e = entry(rec) if rec else {"name": d["name"], "script": d["script"], "world": d["world"]}
        e["reference"] = "dev_set"
        e["dev_set"] = {"step_ms": d["step_ms"], "max_mem_reserved_gib": d["max_mem_reserved_gib"],
                        "max_mem_allocated_gib": d["max_mem_allocated_gib"], "args": d["args"],
                        "source": str(DEV_SET.relative_to(REPO)), "how": dev["how"]}
        if rec:
            e["remeasured"] = e.pop("measured")
        out.append(e)
    dev_names = {d["name"] for d in dev["configs"]}
    for name in order:
        if name in recs and name not in dev_names and recs[name].get("ok"):
            e = entry(recs[name])
            e["reference"] = "groundtruth"
            out.append(e)
    env = json.loads(FIRST_ENV.read_text())
    doc = {
        "what": "Accuracy-benchmark configurations with their real-GPU measurements. step_ms: per-step wall "
                "time (torch.cuda.synchronize + perf_counter around a whole step, as each script measures it) over "
                "the steps after the first 3; median = sorted(steps[3:])[n // 2], as the scripts compute it. Memory: "
                "torch.cuda.max_memory_reserved/allocated of rank 0 (TorchTitan: its logged peak reserved). "
                "'reference' says which measurement the benchmark compares against: the dev set's (data/h200/e2e/dev_set) "
                "or ours (measured). Regenerate: python -m benchmarks.e2e.collect configs",
        "hardware": "4x NVIDIA H200 SXM 141GB (143771 MiB), NVLink NV18 all pairs, driver 580.159.04, "
                    f"torch {env['torch']['torch']}, CUDA {env['torch']['cuda']}, cuDNN {env['torch']['cudnn']}, "
                    f"NCCL {env['torch']['nccl']}, Python {env['python'].split()[0]}; NCCL_NVLS_ENABLE=0",
        "runner": "benchmarks/e2e/groundtruth.py",
        "configs": out,
    }
    CONFIGS.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(out)} configs -> {CONFIGS.relative_to(REPO)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("import")
    i.add_argument("tag", metavar="LEASE/RUN")
    i.add_argument("tar", type=Path)
    i.add_argument("--runner-log", type=Path)
    i.add_argument("--exclude", default="", help="config names whose result is kept under excluded/ (invalid run)")
    i.add_argument("--repeat", action="store_true", help="a repeat measurement: keep it under runs/LEASE/ beside the first")
    g = sub.add_parser("import-log")
    g.add_argument("tag", metavar="LEASE/RUN")
    g.add_argument("name")
    g.add_argument("log", type=Path)
    g.add_argument("--note", required=True, help="how the run differed from groundtruth.py's")
    sub.add_parser("configs")
    a = p.parse_args()
    if a.cmd == "import":
        import_run(a.tag, a.tar, a.runner_log, set(filter(None, a.exclude.split(","))), a.repeat)
    elif a.cmd == "import-log":
        import_log(a.tag, a.name, a.log, a.note)
    else:
        build_configs()


if __name__ == "__main__":
    main()
