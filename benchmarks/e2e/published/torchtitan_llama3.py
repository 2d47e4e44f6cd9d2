"""Published benchmarks: Phantora against TorchTitan's own Llama 3.1 8B runs on Meta's Grand Teton H100s.

TorchTitan published tokens/s per GPU and peak memory of Llama 3.1 8B with FSDP on 8 and 128 H100s (96 GB HBM2e,
500 W) in `benchmarks/llama3_h100_202412_torchtitan.md` of its repository (Tables 1 and 3, rows "FSDP"). This
script runs TorchTitan 0.2.2 unmodified under `phantora torchrun --cluster h100_96gb_grand_teton.toml` with the
settings of those tables, reads tokens/s/GPU and memory from TorchTitan's own log lines (simulated time and
memory), and prints predicted against published with the error and the simulator's wall time. The published
numbers are held out: no constant of Phantora was fitted on them.

    python -m benchmarks.e2e.published.torchtitan_llama3                 # both runs, store the results
    python -m benchmarks.e2e.published.torchtitan_llama3 --only fsdp_8gpu --steps 30
    python -m benchmarks.e2e.published.torchtitan_llama3 --print         # the stored results' table only
    python -m benchmarks.e2e.published.torchtitan_llama3 --no-power-cap  # a what-if, printed, not stored

Results: data/h100/e2e/published_torchtitan/results.json (+ meta.json, README.md); docs/accuracy.md's
"Published benchmarks" section is generated from them by `python -m benchmarks.e2e.report`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common.env import git_commit, write_meta
from benchmarks.common.paths import BENCHMARKS, REPO, data_dir
from benchmarks.e2e import groundtruth

CLUSTER = BENCHMARKS / "e2e" / "published" / "h100_96gb_grand_teton.toml"
RESULTS_DIR = data_dir("h100", "e2e", "published_torchtitan")
SOURCE = ("TorchTitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, "
          "2024-12), Tables 1 and 3, rows \"FSDP\"")
PHANTORA = [sys.executable, "-m", "phantora.cli.main"]
GPUS_PER_NODE = 8
WARMUP_STEPS = 3
"""Steps left out, as the accuracy benchmarks do (first kernel launches, optimizer state)."""
LOG_FREQ = 10
"""TorchTitan logs every LOG_FREQ-th step, as in the published runs (its default): a log line's tokens/s and peak
memory are those of the steps since the last log, and the step that logs synchronizes with the GPU (`loss.item()`)
while the others let the host run ahead, its data loading beside the GPU's work."""
LOCAL_BATCH, SEQ_LEN = 2, 8192


@dataclass(frozen=True)
class PublishedRun:
    """One published row: the job's size and what TorchTitan's log showed at its 90th step."""

    name: str
    nodes: int
    table: str
    tokens_per_s_per_gpu: float
    memory_gib: float

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE


PUBLISHED = (
    PublishedRun("fsdp_8gpu", nodes=1, table="Table 1", tokens_per_s_per_gpu=5762, memory_gib=82.4),
    PublishedRun("fsdp_128gpu", nodes=16, table="Table 3", tokens_per_s_per_gpu=5605, memory_gib=67.0),
)

SETTINGS = {
    "published": "Llama 3.1 8B, FSDP over every GPU, local batch 2, selective activation checkpointing, "
                 "no torch.compile, no Float8",
    "chosen": "seq_len 8192 and per-op selective AC (TorchTitan's llama3_8b.toml, the tables name neither); "
              f"log every {LOG_FREQ}th step as published (read at step 90) and take the logs whose {LOG_FREQ} "
              f"steps all follow {WARMUP_STEPS} warm-up steps; synthetic C4 text and TorchTitan's test tokenizer (token ids do "
              "not change the cost; the vocabulary stays 128256); dedicated hosts (--host-contention none: "
              "Grand Teton hosts are bare-metal servers, not the VMs the host model was measured on)",
}


def torchtitan_args(gpus: int, steps: int, dump_folder: str) -> list[str]:
    """TorchTitan's own preset and flags, with the published tables' settings, FSDP over `gpus` GPUs."""
    tt = groundtruth.TT
    return [
        "--job.config_file", f"{tt}/llama3_8b.toml", "--job.dump_folder", dump_folder,
        "--model.hf_assets_path", tt, "--training.dataset", "c4_test",
        "--training.dataset_path", groundtruth.TT_DATA,
        "--training.local_batch_size", str(LOCAL_BATCH), "--training.seq_len", str(SEQ_LEN),
        "--training.steps", str(steps), "--lr_scheduler.warmup_steps", "2",
        "--parallelism.data_parallel_shard_degree", str(gpus),
        "--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "op",
        "--compile.no-enable", "--checkpoint.no-enable", "--profiling.no-enable-profiling",
        "--metrics.log_freq", str(LOG_FREQ), "--metrics.no-enable-tensorboard", "--validation.no-enable",
    ]


def phantora_command(run: PublishedRun, steps: int, out: str, extra: list[str]) -> list[str]:
    return [*PHANTORA, "torchrun", "--cluster", str(CLUSTER.relative_to(REPO)), "--host-contention", "none",
            "--out", out, "--no-progress", *extra, "--nnodes", str(run.nodes), "--nproc-per-node", str(GPUS_PER_NODE),
            "-m", "torchtitan.train", *torchtitan_args(run.gpus, steps, f"{out}/torchtitan")]


def ensure_data() -> None:
    """TorchTitan reads a synthetic C4 dataset: make it once."""
    if not Path(groundtruth.TT_DATA, "data.json").exists():
        Path(groundtruth.TT_DATA).mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(REPO / groundtruth.TT / "make_synthetic_c4.py"),
                        f"{groundtruth.TT_DATA}/data.json"], check=True)


def logged_steps(log: str, run: PublishedRun) -> list[dict]:
    """TorchTitan's per-step log lines of every rank that ran: step, memory (GiB), tps."""
    parsed = groundtruth.parse({"module": True, "world": run.gpus, "args": [
        "--training.local_batch_size", str(LOCAL_BATCH), "--training.seq_len", str(SEQ_LEN)]}, log)
    if parsed is None:
        raise RuntimeError(f"{run.name}: TorchTitan logged no step")
    return parsed["rank_lines"]


def prediction(lines: list[dict]) -> dict:
    """tokens/s/GPU: the median over the logs whose LOG_FREQ steps all follow the warm-up of the ranks' mean logged
    tps; memory: the largest logged peak reserved of those logs and ranks (TorchTitan resets the peak at each
    log)."""
    by_step: dict[int, list[dict]] = {}
    for line in lines:
        by_step.setdefault(line["step"], []).append(line)
    steady = [step for step in sorted(by_step) if step - LOG_FREQ >= WARMUP_STEPS]
    if not steady:
        raise RuntimeError(f"no log after the warm-up (steps {sorted(by_step)} logged): run at least "
                           f"{first_steady_log()} steps (--steps)")
    tps = {step: statistics.fmean(r["tps"] for r in by_step[step]) for step in sorted(by_step)}
    memory = {step: max(r["memory_reserved_gib"] for r in by_step[step]) for step in sorted(by_step)}
    return {"tokens_per_s_per_gpu": statistics.median(tps[step] for step in steady),
            "memory_gib": max(memory[step] for step in steady),
            "tps_by_step": tps, "memory_gib_by_step": memory, "ranks_logging": len(by_step[steady[0]])}


def first_steady_log() -> int:
    """The first step whose log covers LOG_FREQ steps that all follow the warm-up."""
    return LOG_FREQ * math.ceil((WARMUP_STEPS + LOG_FREQ) / LOG_FREQ)


def step_breakdown(summary: dict) -> dict:
    """What the summary says about where a step's time went (kept with the results to explain an error)."""
    keys = ("gpu_name", "variant", "cluster", "world_size", "representative_ranks", "simulated_time_s",
            "gpu_busy_fraction", "compute_s", "nccl_s", "exposed_comm_s", "nccl_wait_s", "host_blocked_s",
            "mfu_vs_bf16_peak", "peak_reserved_gib", "kernel_time_s_by_class", "power_cap", "host_time",
            "simulator_wall_s", "simulator_cpu_s", "simulator_peak_rss_gib", "warnings")
    return {key: summary[key] for key in keys}


def simulate(run: PublishedRun, steps: int, extra: list[str]) -> dict:
    ensure_data()
    with tempfile.TemporaryDirectory() as out:
        command = phantora_command(run, steps, out, extra)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        wall_s = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"{run.name}: phantora failed:\n{done.stderr[-3000:]}")
        lines = logged_steps(done.stdout + done.stderr, run)
        summary = json.loads((Path(out) / "summary.json").read_text())
    shown = [word if not word.startswith(out) else word.replace(out, "OUT") for word in command[2:]]
    return {"name": run.name, "gpus": run.gpus, "nodes": run.nodes, "steps": steps, "published": asdict(run),
            "predicted": prediction(lines), "wall_s": wall_s, "summary": step_breakdown(summary),
            "command": ["phantora", *shown], "commit": git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}


def error_pct(predicted: float, published: float) -> float:
    return 100.0 * (predicted - published) / published


def print_table(results: list[dict]) -> None:
    print(f"published: {SOURCE}")
    header = (f"{'run':<12} {'GPUs':>5} {'ran':>4} {'tokens/s/GPU pub':>16} {'pred':>7} {'err %':>7}   "
              f"{'memory GiB pub':>14} {'pred':>6} {'err %':>7}   {'wall s':>7}")
    print(header)
    print("-" * len(header))
    for r in results:
        pub, pred = r["published"], r["predicted"]
        tps, mem = pred["tokens_per_s_per_gpu"], pred["memory_gib"]
        print(f"{r['name']:<12} {r['gpus']:>5} {r['summary'].get('representative_ranks', r['gpus']):>4} "
              f"{pub['tokens_per_s_per_gpu']:>16,.0f} {tps:>7,.0f} "
              f"{error_pct(tps, pub['tokens_per_s_per_gpu']):>+7.1f}   {pub['memory_gib']:>14.1f} {mem:>6.2f} "
              f"{error_pct(mem, pub['memory_gib']):>+7.1f}   {r['wall_s']:>7.0f}")


README = """# TorchTitan's published Llama 3.1 8B runs, simulated

`results.json`: Phantora's prediction of the two FSDP rows of TorchTitan's published H100 benchmark
(`benchmarks/llama3_h100_202412_torchtitan.md`, Tables 1 and 3: 8 and 128 GPUs of Meta's Grand Teton, H100 96 GB
HBM2e at 500 W, 400 Gb/s per GPU), one entry per run: the published numbers, the tokens/s/GPU and memory
TorchTitan logged in simulation (every 10th step, as published; every rank that ran), the simulator's wall time, the run summary's
step breakdown and the command. Cluster: `benchmarks/e2e/published/h100_96gb_grand_teton.toml`.
Written by `python -m benchmarks.e2e.published.torchtitan_llama3`; docs/accuracy.md's "Published benchmarks"
is generated from it. Not a measurement: the published numbers are TorchTitan's.
"""


def store(results: list[dict], argv: list[str]) -> Path:
    """Merge `results` into the stored ones (a run replaces its own entry) and write the leaf's notes."""
    path = RESULTS_DIR / "results.json"
    old = json.loads(path.read_text())["runs"] if path.exists() else []
    new = {r["name"] for r in results}
    runs = [r for r in old if r["name"] not in new] + results
    order = [p.name for p in PUBLISHED]
    runs.sort(key=lambda r: order.index(r["name"]))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"source": SOURCE, "settings": SETTINGS, "runs": runs}, indent=1) + "\n")
    (RESULTS_DIR / "README.md").write_text(README)
    write_meta(RESULTS_DIR, __file__, argv, lease="none",
               what="Phantora's prediction of TorchTitan's published Llama 3.1 8B FSDP runs (no GPU: simulated)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated runs: {', '.join(p.name for p in PUBLISHED)}")
    parser.add_argument("--steps", type=int, default=first_steady_log(),
                        help=f"training steps per run (at least {first_steady_log()}: a log every {LOG_FREQ} steps "
                             f"after {WARMUP_STEPS} warm-up steps)")
    parser.add_argument("--print", dest="print_only", action="store_true", help="run nothing: the stored table")
    parser.add_argument("--no-power-cap", action="store_true",
                        help="what-if: GPUs never slowed by their power limit (printed, not stored)")
    args = parser.parse_args(argv)
    if args.print_only:
        stored = RESULTS_DIR / "results.json"
        if not stored.exists():
            parser.error(f"{stored} does not exist: run the benchmark first")
        print_table(json.loads(stored.read_text())["runs"])
        return 0
    names = set(filter(None, args.only.split(",")))
    unknown = names - {p.name for p in PUBLISHED}
    if unknown:
        parser.error(f"unknown run(s) {sorted(unknown)}; the runs are {', '.join(p.name for p in PUBLISHED)}")
    if args.steps < first_steady_log():
        parser.error(f"--steps must be at least {first_steady_log()}: a log every {LOG_FREQ} steps after the "
                     f"{WARMUP_STEPS} warm-up steps")
    results = []
    for run in PUBLISHED:
        if names and run.name not in names:
            continue
        try:
            results.append(simulate(run, args.steps, ["--no-power-cap"] * args.no_power_cap))
        except RuntimeError as error:
            print(f"{run.name}: FAILED: {str(error).splitlines()[0]}", file=sys.stderr)
            return 1
        print(f"{run.name}: done in {results[-1]['wall_s']:.0f} s", flush=True)
    if not args.no_power_cap:
        print(f"wrote {store(results, sys.argv[1:] if argv is None else argv)}")
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
