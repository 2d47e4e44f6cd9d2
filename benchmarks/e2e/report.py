"""The accuracy table of docs/accuracy.md, generated from the stored results of the accuracy benchmarks.

Two benchmarks compare Phantora with real runs and write their rows with `--json`:
`benchmarks/e2e/accuracy.py` (the fitting set) and `benchmarks/e2e/frameworks/accuracy.py` (the framework
programs, held out). This script copies such rows into `data/<gpu>/e2e/accuracy/rows.json`, one file per GPU model,
each row as its benchmark wrote it plus its set (from `benchmarks/e2e/split.toml`), the commit and the date;
then it rewrites the table and the summary lines between the markers of docs/accuracy.md. Where the doc has the
"published" markers, it also rewrites the table of TorchTitan's published runs from the results that
`benchmarks/e2e/published/torchtitan_llama3.py` stored (data/h100/e2e/published_torchtitan/results.json).

    python -m benchmarks.e2e.report                          # rewrite the table from data/*/e2e/accuracy/rows.json
    python -m benchmarks.e2e.report --check                  # exit 1 if docs/accuracy.md is not what it would write
    python -m benchmarks.e2e.report --import rows.json fw.json --commit abc1234   # store rows, then rewrite

It reads the benchmarks' output files only (their rows are the interface), not their code.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from benchmarks.common.paths import BENCHMARKS, DATA, REPO

DOC = REPO / "docs" / "accuracy.md"
SPLIT = BENCHMARKS / "e2e" / "split.toml"
BEGIN, END = "<!-- table:begin -->", "<!-- table:end -->"
PUBLISHED = DATA / "h100" / "e2e" / "published_torchtitan" / "results.json"
PUBLISHED_BEGIN, PUBLISHED_END = "<!-- published:begin -->", "<!-- published:end -->"
SETS = {"fitting": "fitting", "held_out": "held out"}
# Which benchmark wrote a row, told by its shape: the fitting benchmark pairs (measured, predicted) per quantity,
# the framework benchmark nests a "measured" and a "predicted" record.
FITTING_BENCHMARK = "benchmarks/e2e/accuracy.py"
FRAMEWORK_BENCHMARK = "benchmarks/e2e/frameworks/accuracy.py"


@dataclass(frozen=True)
class Comparison:
    """One configuration on one GPU model: what was measured, what Phantora predicted (None: it failed)."""

    name: str
    gpu: str
    set: str
    step_ms: tuple[float, float | None]
    reserved_gib: tuple[float, float | None]


def load_split(path: Path = SPLIT) -> dict[tuple[str, str], dict]:
    """The split's entries by (name, gpu)."""
    entries = tomllib.loads(path.read_text())["config"]
    by_key = {(e["name"], e["gpu"]): e for e in entries}
    if len(by_key) != len(entries):
        raise ValueError(f"{path}: a (name, gpu) pair is listed twice")
    unknown = {e["set"] for e in entries} - SETS.keys()
    if unknown:
        raise ValueError(f"{path}: unknown set(s) {sorted(unknown)}; the sets are {sorted(SETS)}")
    return by_key


def benchmark_of(row: dict) -> str:
    if "step_ms" in row:
        return FITTING_BENCHMARK
    if "measured" in row:
        return FRAMEWORK_BENCHMARK
    raise ValueError(f"row {row.get('name')!r} is in neither benchmark's format")


def gpu_of(row: dict, split: dict[tuple[str, str], dict]) -> str:
    """A framework row names its GPU; a fitting-benchmark row does not, and its name must then be unique."""
    if "gpu" in row:
        return row["gpu"]
    gpus = [gpu for name, gpu in split if name == row["name"]]
    if len(gpus) != 1:
        raise ValueError(f"{row['name']}: the row names no GPU and the split has it for {gpus or 'none'}")
    return gpus[0]


def comparison(row: dict) -> Comparison:
    """A stored row, in either benchmark's format, as measured and predicted step time and peak reserved memory."""
    if benchmark_of(row) == FITTING_BENCHMARK:
        return Comparison(row["name"], row["gpu"], row["set"], tuple(row["step_ms"]), tuple(row["reserved_gib"]))
    measured, predicted = row["measured"], row["predicted"]
    return Comparison(
        row["name"], row["gpu"], row["set"],
        (1e3 * measured["step_s"], 1e3 * predicted["step_s"] if predicted else None),
        (measured["reserved_gib"], predicted["reserved_gib"] if predicted else None))


ROWS_README = """# Predicted against measured, every configuration of the accuracy table

`rows.json`: the rows of `benchmarks/e2e/accuracy.py` (the fitting set) and `benchmarks/e2e/frameworks/accuracy.py`
(held out) for this GPU model, each with its set (`benchmarks/e2e/split.toml`), the commit and date it was simulated
at; stored by `python -m benchmarks.e2e.report --import ROWS...`, which writes docs/accuracy.md's table from them.
`meta.json`: the last import. Not a measurement: the measurements are in `../groundtruth/` and `../frameworks/`.
"""


def stored_path(data: Path, gpu: str) -> Path:
    return data / gpu / "e2e" / "accuracy" / "rows.json"


def _installed(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def write_leaf_notes(path: Path, *, commit: str, date: str, argv: list[str]) -> None:
    """The README and meta.json every data leaf has (data/README.md)."""
    readme = path.parent / "README.md"
    if not readme.exists():
        readme.write_text(ROWS_README)
    meta = {"what": "simulated rows of the accuracy table", "script": "benchmarks/e2e/report.py", "argv": argv,
            "commit": commit, "date": date, "versions": {"torch": _installed("torch")},
            "machine": {"kind": "no GPU: simulated", "platform": platform.platform()}, "lease": "none"}
    (path.parent / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def read_stored(data: Path) -> list[dict]:
    """Every stored row of every GPU model."""
    return [row for path in sorted(data.glob("*/e2e/accuracy/rows.json")) for row in json.loads(path.read_text())["rows"]]


def import_rows(rows: list[dict], split: dict[tuple[str, str], dict], data: Path, *, commit: str, date: str,
                note: str = "") -> list[Path]:
    """Store rows in their GPU's accuracy/rows.json, replacing any stored row of the same name; returns the files written."""
    by_gpu: dict[str, list[dict]] = {}
    for row in rows:
        gpu = gpu_of(row, split)
        entry = split.get((row["name"], gpu))
        if entry is None:
            raise ValueError(f"{row['name']} on {gpu} is not in the split: add it to benchmarks/e2e/split.toml first")
        stored = {**row, "gpu": gpu, "set": entry["set"], "benchmark": benchmark_of(row), "commit": commit,
                  "date": date}
        by_gpu.setdefault(gpu, []).append({**stored, "note": note} if note else stored)
    written = []
    for gpu, new in by_gpu.items():
        path = stored_path(data, gpu)
        old = json.loads(path.read_text())["rows"] if path.exists() else []
        replaced = {row["name"] for row in new}
        kept = [row for row in old if row["name"] not in replaced]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gpu": gpu, "rows": kept + new}, indent=1) + "\n")
        write_leaf_notes(path, commit=commit, date=date, argv=[row["name"] for row in new])
        written.append(path)
    return written


def error_pct(predicted: float | None, measured: float) -> float | None:
    if predicted is None or not measured or math.isnan(measured) or math.isnan(predicted):
        return None
    return 100.0 * (predicted - measured) / measured


def with_current_sets(rows: list[dict], split: dict[tuple[str, str], dict]) -> list[dict]:
    """The stored rows of configurations in the split, each with the split's set now (a row stored before its
    configuration changed sets shows the new one)."""
    return [{**row, "set": split[key]["set"]} for row in rows if (key := (row["name"], row["gpu"])) in split]


def in_split_order(rows: list[dict], split: dict[tuple[str, str], dict]) -> list[dict]:
    """Rows of the fitting set first, then held out; within a set as split.toml lists them."""
    order = {key: i for i, key in enumerate(split)}
    return sorted(rows, key=lambda row: (list(SETS).index(row["set"]), order[(row["name"], row["gpu"])]))


def _number(value: float | None, digits: int) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f} %"


def gpus_in_order(comparisons: list[Comparison]) -> list[str]:
    """The GPU models of the rows, in the order they first appear (the split's)."""
    return list(dict.fromkeys(c.gpu for c in comparisons))


def _cell(pair: tuple[float, float | None], digits: int) -> str:
    """measured → predicted (error), or measured → failed."""
    measured, predicted = pair
    if predicted is None:
        return f"{_number(measured, digits)} → failed"
    return f"{_number(measured, digits)} → {_number(predicted, digits)} ({_percent(error_pct(predicted, measured))})"


def table(comparisons: list[Comparison]) -> list[str]:
    """One row per configuration and set, two columns (step time, peak reserved memory) per GPU model; a blank
    cell where the configuration did not run on that GPU."""
    gpus = gpus_in_order(comparisons)
    by_config: dict[tuple[str, str], dict[str, Comparison]] = {}
    for c in comparisons:
        by_config.setdefault((c.set, c.name), {})[c.gpu] = c
    header = "".join(f" {gpu.upper()} step ms | {gpu.upper()} reserved GiB |" for gpu in gpus)
    lines = ["Each cell: measured → predicted (error).", "",
             f"| set | config |{header}", "| --- | --- |" + " ---: | ---: |" * len(gpus)]
    for (set_name, name), on_gpu in by_config.items():
        cells = "".join(f" {_cell(on_gpu[gpu].step_ms, 1)} | {_cell(on_gpu[gpu].reserved_gib, 2)} |"
                        if gpu in on_gpu else " | |" for gpu in gpus)
        lines.append(f"| {SETS[set_name]} | {name} |{cells}")
    return lines


def _mean_max(errors: list[float]) -> str:
    if not errors:
        return "none"
    magnitudes = [abs(e) for e in errors]
    return f"mean {sum(magnitudes) / len(magnitudes):.1f} %, max {max(magnitudes):.1f} %"


def summary(comparisons: list[Comparison]) -> list[str]:
    """One line per set and GPU model: mean and max |error| of step time and of peak reserved memory."""
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault((c.set, c.gpu), []).append(c)
    lines = []
    for (set_name, gpu), members in groups.items():
        steps = [e for c in members if (e := error_pct(c.step_ms[1], c.step_ms[0])) is not None]
        memory = [e for c in members if (e := error_pct(c.reserved_gib[1], c.reserved_gib[0])) is not None]
        failed = sum(c.step_ms[1] is None for c in members)
        lines.append(f"- **{SETS[set_name]}, {gpu}** ({len(members)} configurations"
                     f"{f', {failed} failed' if failed else ''}): step time |error| {_mean_max(steps)}; "
                     f"peak reserved memory |error| {_mean_max(memory)}.")
    return lines


FRAMEWORK_CONFIGS = REPO / "benchmarks" / "e2e" / "frameworks" / "configs.json"
FRAMEWORK_OF_SCRIPT = {
    "examples/hf_llama_loop.py": "Transformers (own loop)", "examples/hf_trainer.py": "Transformers Trainer",
    "examples/accelerate_train.py": "Accelerate", "examples/lightning_train.py": "Lightning",
    "examples/deepspeed_train.py": "DeepSpeed", "examples/megatron_core_gpt.py": "Megatron-core",
    "torchtitan.train": "TorchTitan", "benchmarks/workloads/nanogpt_train.py": "PyTorch (own loop)",
    "benchmarks/workloads/llama_train.py": "PyTorch (own loop)"}
"""The framework each program of the framework benchmark runs under, for the per-framework summary."""


def frameworks_by_config(path: Path = FRAMEWORK_CONFIGS) -> dict[str, str]:
    return {c["name"]: FRAMEWORK_OF_SCRIPT[c["script"]] for c in json.loads(path.read_text())["configs"]}


def framework_summary(comparisons: list[Comparison], frameworks: dict[str, str]) -> list[str]:
    """Per framework and GPU model, the framework programs' step-time errors: mean and max |error|."""
    groups: dict[tuple[str, str], list[float]] = {}
    for c in comparisons:
        if c.name in frameworks:
            error = error_pct(c.step_ms[1], c.step_ms[0])
            groups.setdefault((frameworks[c.name], c.gpu), [])
            if error is not None:
                groups[(frameworks[c.name], c.gpu)].append(error)
    return [f"{framework} ({gpu}, {len(errors)}): {_mean_max(errors)}"
            for (framework, gpu), errors in sorted(groups.items())]


def provenance(rows: list[dict]) -> list[str]:
    """Which benchmark at which commit produced the stored rows."""
    groups: dict[tuple, int] = {}
    for row in rows:
        key = (SETS[row["set"]], row["gpu"], row["benchmark"], row["commit"], row["date"], row.get("note", ""))
        groups[key] = groups.get(key, 0) + 1
    return [f"{set_name}, {gpu}: {count} rows by `{benchmark}` at commit {commit} ({date})"
            + (f", {note}" if note else "")
            for (set_name, gpu, benchmark, commit, date, note), count in groups.items()]


def generated_block(rows: list[dict], split: dict[tuple[str, str], dict]) -> str:
    current = in_split_order(with_current_sets(rows, split), split)
    comparisons = [comparison(row) for row in current]
    stored = {(row["name"], row["gpu"]) for row in current}
    missing = [f"{name} ({gpu})" for name, gpu in split if (name, gpu) not in stored]
    not_run = [f"not run yet: {', '.join(missing)}"] if missing else []
    per_framework = framework_summary(comparisons, frameworks_by_config())
    by_framework = ([f"- **Per framework**, step time |error| (GPU, configurations): {'; '.join(per_framework)}."]
                    if per_framework else [])
    lines = [BEGIN, *table(comparisons), "", *summary(comparisons), *by_framework, "",
             f"Where the rows come from: {'; '.join([*provenance(current), *not_run])}."]
    return "\n".join([*lines, END])


def published_block(results: dict) -> str:
    """TorchTitan's published runs against Phantora's prediction, as the published benchmark stored them."""
    lines = [PUBLISHED_BEGIN,
             "| run | GPUs | processes | tokens/s/GPU published | predicted | error | memory GiB published "
             "| predicted | error | simulator wall s | simulated at |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for run in results["runs"]:
        pub, pred = run["published"], run["predicted"]
        tps, memory = pred["tokens_per_s_per_gpu"], pred["memory_gib"]
        lines.append(f"| {run['name']} | {run['gpus']} | {run['summary']['representative_ranks']} "
                     f"| {pub['tokens_per_s_per_gpu']:,.0f} | {tps:,.0f} "
                     f"| {_percent(error_pct(tps, pub['tokens_per_s_per_gpu']))} | {pub['memory_gib']:.1f} "
                     f"| {memory:.2f} | {_percent(error_pct(memory, pub['memory_gib']))} | {run['wall_s']:.0f} "
                     f"| {_short(run['commit'])}, {run['date']}, {run['steps']} steps |")
    return "\n".join([*lines, PUBLISHED_END])


def _short(commit: str) -> str:
    """A commit as `git rev-parse --short` writes it, with its "+dirty" mark."""
    name, dirty, mark = commit.partition("+")
    return name[:7] + dirty + mark


def with_block(doc: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """The document with the text between the markers (markers included) replaced by `block`."""
    start, stop = doc.find(begin), doc.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"the document has no {begin} ... {end} markers")
    return doc[:start] + block + doc[stop + len(end):]


def updated_doc(doc: str, rows: list[dict], split: dict[tuple[str, str], dict], published: Path) -> str:
    """The accuracy table rewritten, and the published runs' table where the doc has its markers."""
    updated = with_block(doc, generated_block(rows, split))
    if PUBLISHED_BEGIN not in doc:
        return updated
    if not published.exists():
        raise ValueError(f"{published} does not exist: run python -m benchmarks.e2e.published.torchtitan_llama3")
    return with_block(updated, published_block(json.loads(published.read_text())), PUBLISHED_BEGIN, PUBLISHED_END)


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import", dest="rows", type=Path, nargs="+", metavar="ROWS",
                        help="rows written by an accuracy benchmark's --json: store them before rewriting")
    parser.add_argument("--commit", default="", help="the commit the imported rows were simulated at (default HEAD)")
    parser.add_argument("--date", default="", help="when they were simulated (default today)")
    parser.add_argument("--note", default="", help="a remark stored with the imported rows and shown in the doc")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the doc is out of date")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--split", type=Path, default=SPLIT)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--published", type=Path, default=PUBLISHED,
                        help="results of benchmarks/e2e/published/torchtitan_llama3.py")
    args = parser.parse_args(argv)
    split = load_split(args.split)
    if args.rows:
        if args.check:
            parser.error("--check changes nothing: it cannot --import")
        rows = [row for path in args.rows for row in json.loads(path.read_text())]
        for path in import_rows(rows, split, args.data, commit=args.commit or head_commit(),
                                date=args.date or datetime.date.today().isoformat(), note=args.note):
            print(f"wrote {path}")
    doc = args.doc.read_text()
    try:
        updated = updated_doc(doc, read_stored(args.data), split, args.published)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    if args.check:
        if updated != doc:
            print(f"{args.doc} is out of date: run python -m benchmarks.e2e.report", file=sys.stderr)
            return 1
        return 0
    if updated != doc:
        args.doc.write_text(updated)
        print(f"rewrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
