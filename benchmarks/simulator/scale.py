"""Scale benchmark: simulator wall time per simulated step and peak host memory vs simulated GPUs.

    python -m benchmarks.simulator.scale                              # FSDP2 Llama, 2, 8 and 32 ranks
    python -m benchmarks.simulator.scale --ranks 2,8 --parallel ddp --steps 8 --name ddp
    python -m benchmarks.simulator.scale --diff-steps 4               # also cross-check the per-step time
    python -m benchmarks.simulator.scale --model llama3-8b --gpu h100 --host-contention none \
        --ranks 8,64,256,1024 --steps 5 --name llama3_8b_h100        # representative ranks, up to 1024 GPUs
    python -m benchmarks.simulator.scale --workload torchtitan \
        --cluster benchmarks/e2e/published/h100_96gb_grand_teton.toml --host-contention none \
        --ranks 8,64,256,1024 --steps 5 --name torchtitan_llama3_8b_h100   # TorchTitan, unmodified

Runs `benchmarks/workloads/llama_train.py` (or, with `--workload torchtitan`, TorchTitan's Llama 3.1 8B FSDP as
its published runs train it) under `phantora torchrun --gpu GPU` at each rank count
(up to 8: one node of N; above: N/8 nodes of 8), one run at a time, and measures from outside. A job
of several nodes runs representative ranks (`--simulate auto`, phantora's `--ranks auto`; the
`processes` column says how many); `--simulate all` runs every rank:

- **Wall time per simulated step**: rank 0 prints `step k ... time X ms` after each step's
  `torch.cuda.synchronize()`, whose reply needs every rank's part of the step's collectives, so the
  arrival times of these lines in the launcher's (line-flushed) output pace the whole job. The
  per-step wall time is the median interval between consecutive step lines from step 2 on (steps 0
  and 1 carry warm-up: lazy FSDP init, first-call caches). `to_first_step_s` (launch to the step-0
  line: interpreter and torch import, install, init_process_group, model setup, step 0) and
  `finish_s` (last step line to exit: the program's end, the coordinator draining, reports and
  trace) are reported apart. `--diff-steps N` cross-checks with a second run of steps+N:
  (wall(steps+N) - wall(steps)) / N.
- **CPU per step**: utime+stime of the rank processes and of the launcher (coordinator thread and
  output pump), read from /proc/PID/stat, between the same step lines.
- **Host memory**, sampled from /proc every 1/`--hz` s over the launcher's process tree (launcher,
  ranks, anything they start): the peak of the sum of VmRSS; the peak *footprint*, sum of RssAnon +
  the largest RssFile+RssShmem (rank processes are exec'd, not forked, so anonymous pages are
  private; file pages, torch's libraries, are the same files in every rank); the largest VmHWM of a
  rank and of the launcher. PSS (/proc/PID/smaps_rollup) costs ~10 ms per process to read here, so
  its sum is taken only every `--pss-interval` s: a sampled lower bound of the peak, a cross-check
  of the footprint.
- From the run: rank 0's simulated step time, the coordinator's record count (summary.json
  `simulator_records`, when the launcher writes it) and span/collective counts.

A baseline run, one rank with an empty script (`phantora run`), gives the fixed cost of a rank
process (import, install, report) in wall time and memory.

Writes the raw results to data/simulator/scale/<name>.json (default name: scale; the date is inside) and a
plot to data/simulator/scale/<name>.png; prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from benchmarks.common.paths import BENCHMARKS, DATA, REPO
from benchmarks.e2e import groundtruth
from benchmarks.e2e.published import torchtitan_llama3 as published
from phantora.config.steps import process_cpu_s

WORKLOAD = BENCHMARKS / "workloads" / "llama_train.py"
OUT_DIR = DATA / "simulator" / "scale"
PHANTORA = [sys.executable, "-m", "phantora.cli.main"]
GPUS_PER_NODE = 8
"""An H200 HGX node."""
STEP_LINE = re.compile(r"^\[rank0\]:step (\d+) .*time ([0-9.]+)ms")
RESULT_LINE = re.compile(r"^\[rank0\]:(\{\"script\".*)$")
WARMUP_STEPS = 2
"""Steps left out of the per-step median (lazy init and first-call caches)."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
GIB = 2**30


# --- sampling the process tree --------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def _tree(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += _children(pid)
    return pids


def _status_kib(pid: int) -> dict[str, int] | None:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem in KiB (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0])
    return out if "VmRSS" in out else None  # a zombie has no memory lines


def _pss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _machine_busy_s() -> float:
    """CPU seconds all processes of the machine have used since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def _rank_of(pid: int) -> int | None:
    """RANK from the process's environment (rank processes have it; the launcher and others not)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


@dataclass(slots=True)
class TreeStats:
    """What the sampler saw; memory in bytes, CPU in seconds, times relative to the launch."""

    samples: int = 0
    peak_rss_sum: int = 0
    peak_footprint: int = 0
    peak_pss_sum: int = 0
    pss_sweeps: int = 0
    peak_processes: int = 0
    launcher_hwm: int = 0
    rank_hwm: dict[int, int] = field(default_factory=dict)
    """Peak VmHWM by RANK (-pid for a process without RANK)."""
    timeline: list[tuple[float, int, int, float, float]] = field(default_factory=list)
    """(t_s, rss_sum, footprint, ranks_cpu_s, launcher_cpu_s) per sample."""
    pss_timeline: list[tuple[float, int]] = field(default_factory=list)


class TreeSampler(threading.Thread):
    """Samples /proc for the launcher and all its descendants until stopped."""

    def __init__(self, root: int, started: float, interval_s: float, pss_interval_s: float) -> None:
        super().__init__(daemon=True)
        self.root, self.started = root, started
        self.interval_s, self.pss_interval_s = interval_s, pss_interval_s
        self.stats = TreeStats()
        self._halt = threading.Event()
        self._ranks: dict[int, int | None] = {}
        self._cpu: dict[int, float] = {}
        """Last CPU time seen per pid (a rank's CPU stays counted after it exits)."""

    def stop(self) -> TreeStats:
        self._halt.set()
        self.join()
        return self.stats

    def run(self) -> None:
        next_pss = time.monotonic() + self.pss_interval_s
        while not self._halt.is_set():
            now = time.monotonic()
            self._sample(now)
            if now >= next_pss:
                self._sample_pss(now)
                next_pss = time.monotonic() + self.pss_interval_s
            self._halt.wait(max(0.0, self.interval_s - (time.monotonic() - now)))

    def _sample(self, now: float) -> None:
        st = self.stats
        rss_sum = anon_sum = shared_max = 0
        pids = _tree(self.root)
        for pid in pids:
            m = _status_kib(pid)
            if m is None:
                continue
            if self._ranks.get(pid) is None:  # again until found: a child has RANK only once it has exec'd
                self._ranks[pid] = None if pid == self.root else _rank_of(pid)
            rss_sum += m["VmRSS"] * 1024
            anon_sum += m.get("RssAnon", 0) * 1024
            shared_max = max(shared_max, (m.get("RssFile", 0) + m.get("RssShmem", 0)) * 1024)
            hwm = m.get("VmHWM", 0) * 1024
            rank = self._ranks[pid]
            if pid == self.root:
                st.launcher_hwm = max(st.launcher_hwm, hwm)
            else:  # a rank (or something it started; `phantora run` sets no RANK: key it by pid)
                key = rank if rank is not None else -pid
                st.rank_hwm[key] = max(st.rank_hwm.get(key, 0), hwm)
            cpu = process_cpu_s(pid)
            if cpu is not None:
                self._cpu[pid] = cpu
        footprint = anon_sum + shared_max
        st.samples += 1
        st.peak_rss_sum = max(st.peak_rss_sum, rss_sum)
        st.peak_footprint = max(st.peak_footprint, footprint)
        st.peak_processes = max(st.peak_processes, len(pids))
        launcher_cpu = self._cpu.get(self.root, 0.0)
        others_cpu = sum(c for pid, c in self._cpu.items() if pid != self.root)
        st.timeline.append((now - self.started, rss_sum, footprint, others_cpu, launcher_cpu))

    def _sample_pss(self, now: float) -> None:
        total = 0
        for pid in _tree(self.root):
            pss = _pss_kib(pid)
            total += (pss or 0) * 1024
        self.stats.pss_sweeps += 1
        self.stats.peak_pss_sum = max(self.stats.peak_pss_sum, total)
        self.stats.pss_timeline.append((now - self.started, total))


# --- one run --------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    parallel: str
    steps: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab: int
    seq: int
    batch: int
    ac: str = "none"

    def args(self, steps: int | None = None) -> list[str]:
        return ["--parallel", self.parallel, "--ac", self.ac, "--steps", str(steps or self.steps), "--dim", str(self.dim),
                "--n-layers", str(self.n_layers), "--n-heads", str(self.n_heads), "--n-kv-heads",
                str(self.n_kv_heads), "--ffn-dim", str(self.ffn_dim), "--vocab", str(self.vocab),
                "--seq", str(self.seq), "--batch", str(self.batch)]

    @property
    def name(self) -> str:
        return str(WORKLOAD.relative_to(REPO))

    def program(self, ranks: int, steps: int, out: str) -> list[str]:
        """What `phantora torchrun` runs (after its own options)."""
        return [str(WORKLOAD), *self.args(steps)]

    def step_of(self, line: str) -> tuple[int, float] | None:
        """(step, simulated ms) from one line of the launcher's output, if it is rank 0's step line."""
        m = STEP_LINE.match(line)
        return (int(m.group(1)), float(m.group(2))) if m else None

    def title(self) -> str:
        return f"{self.parallel} Llama dim {self.dim} x {self.n_layers} layers, seq {self.seq}, {self.steps} steps"


@dataclass(frozen=True, kw_only=True, slots=True)
class TorchTitanWorkload:
    """TorchTitan's Llama 3.1 8B, unmodified, as its published FSDP runs train it on every GPU
    (benchmarks/e2e/published/torchtitan_llama3.py: local batch 2, seq 8192, per-op selective AC)."""

    steps: int

    @property
    def name(self) -> str:
        return "-m torchtitan.train"

    def program(self, ranks: int, steps: int, out: str) -> list[str]:
        published.ensure_data()
        return ["-m", "torchtitan.train", *published.torchtitan_args(ranks, steps, f"{out}/torchtitan")]

    def step_of(self, line: str) -> tuple[int, float] | None:
        """Rank 0's TorchTitan step line: its step and the step time its tokens/s implies."""
        if not line.startswith("[rank0]:") or not (m := groundtruth.TT_STEP.search(groundtruth.ANSI.sub("", line))):
            return None
        tokens = published.LOCAL_BATCH * published.SEQ_LEN
        return int(m.group(1)), 1e3 * tokens / int(m.group(6).replace(",", ""))

    def title(self) -> str:
        return (f"TorchTitan Llama 3.1 8B FSDP, local batch {published.LOCAL_BATCH}, seq {published.SEQ_LEN}, "
                f"selective AC, {self.steps} steps")


def layout(ranks: int) -> tuple[int, int]:
    """(nnodes, nproc_per_node): one node up to 8 ranks, else nodes of 8."""
    if ranks <= GPUS_PER_NODE:
        return 1, ranks
    if ranks % GPUS_PER_NODE:
        raise SystemExit(f"scale.py: {ranks} ranks is not a whole number of {GPUS_PER_NODE}-GPU nodes")
    return ranks // GPUS_PER_NODE, GPUS_PER_NODE


def torchrun_command(ranks: int, workload: Workload | TorchTitanWorkload, out: str, steps: int,
                     args: argparse.Namespace) -> list[str]:
    nnodes, nproc = layout(ranks)
    target = (["--cluster", str(cluster_with_nodes(args.cluster, nnodes, Path(out)))] if args.cluster
              else ["--gpu", args.gpu])
    return [*PHANTORA, "torchrun", *target, "--out", out, "--no-progress", "--ranks", args.simulate,
            "--host-contention", args.host_contention, *([] if args.trace else ["--no-trace"]),
            "--nnodes", str(nnodes), "--nproc-per-node", str(nproc), *workload.program(ranks, steps, out)]


NODES_LINE = re.compile(r"^nodes\s*=\s*(\d+)", re.MULTILINE)


def cluster_with_nodes(cluster: Path, nnodes: int, out: Path) -> Path:
    """`cluster` itself if it has `nnodes` nodes or more; else a copy beside `out` with `nodes = nnodes`: the same
    GPUs, nodes and network, as many nodes as the job takes (a published cluster file has the published job's)."""
    text = Path(cluster).read_text()
    m = NODES_LINE.search(text)
    if m is None or int(m.group(1)) >= nnodes:
        return Path(cluster)
    grown = out.parent / f"{out.name}_{Path(cluster).stem}_{nnodes}_nodes.toml"
    grown.write_text(NODES_LINE.sub(f"nodes = {nnodes}", text, count=1))
    return grown


def run_once(command: list[str], *, hz: float, pss_interval_s: float, log: Path,
             step_of: Callable[[str], tuple[int, float] | None] = lambda line: None) -> dict:
    """Run one phantora command, sampling its process tree; return timings, memory and its summary. Its output
    (stdout and stderr, where a program's logging goes) is copied to `log`; `step_of` reads step lines from it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the launcher's stdout is a pipe here: keep lines timely
    steps: list[tuple[int, float, float]] = []  # (step, wall s since launch, simulated ms)
    result = None
    with open(log, "w") as err:
        busy_before, own_before = _machine_busy_s(), time.process_time()
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                env=env)
        sampler = TreeSampler(proc.pid, started, 1.0 / hz, pss_interval_s)
        sampler.start()
        for line in proc.stdout:
            now = time.monotonic() - started
            err.write(line)
            if step := step_of(line):
                steps.append((step[0], now, step[1]))
            elif m := RESULT_LINE.match(line):
                result = json.loads(m.group(1))
        code = proc.wait()
        wall_s = time.monotonic() - started
        stats = sampler.stop()
        machine_cpu_s = _machine_busy_s() - busy_before
        sampler_cpu_s = time.process_time() - own_before
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} failed with exit code {code}; see {log}:\n"
                           + log.read_text()[-3000:])
    return {"wall_s": wall_s, "steps": steps, "result": result, "stats": stats, "machine_cpu_s": machine_cpu_s,
            "sampler_cpu_s": sampler_cpu_s}


MODELS = {
    "llama3-8b": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, vocab=128256, seq=8192, batch=1,
                      ac="full"),
}
"""Shapes of published models (Llama 3 8B: Meta's model card; sequence 8192 as TorchTitan trains it, with
activation checkpointing so that 8 to 64 GPUs of 80 GB hold it)."""


def _cpu_at(timeline: list[tuple], t: float) -> tuple[float, float]:
    """(ranks CPU s, launcher CPU s) at the last sample no later than t."""
    best = timeline[0]
    for sample in timeline:
        if sample[0] > t:
            break
        best = sample
    return best[3], best[4]


def measure(ranks: int, workload: Workload | TorchTitanWorkload, args: argparse.Namespace, scratch: Path) -> dict:
    out = scratch / f"out{ranks}"
    command = torchrun_command(ranks, workload, str(out), workload.steps, args)
    print(f"-- {ranks} ranks: {' '.join(command[2:])}", flush=True)
    run = run_once(command, hz=args.hz, pss_interval_s=args.pss_interval, log=scratch / f"stderr{ranks}.log",
                   step_of=workload.step_of)
    steps, stats = run["steps"], run["stats"]
    if len(steps) != workload.steps:
        raise RuntimeError(f"{ranks} ranks: saw {len(steps)} step lines of {workload.steps}")
    times = [t for _, t, _ in steps]
    intervals = [b - a for a, b in zip(times, times[1:])]
    steady = intervals[WARMUP_STEPS - 1:]  # interval i ends at step i+1
    per_step_s = statistics.median(steady)
    cpu = [_cpu_at(stats.timeline, t) for t in times[WARMUP_STEPS - 1:]]
    n = len(cpu) - 1
    ranks_cpu_per_step = (cpu[-1][0] - cpu[0][0]) / n
    launcher_cpu_per_step = (cpu[-1][1] - cpu[0][1]) / n
    summary = json.loads((out / "summary.json").read_text())
    row = {
        "ranks": ranks,
        "processes": summary.get("representative_ranks", ranks),
        "nnodes": layout(ranks)[0],
        "nproc_per_node": layout(ranks)[1],
        "command": command[2:],
        "wall_s": run["wall_s"],
        "to_first_step_s": times[0],
        "wall_per_step_s": per_step_s,
        "wall_per_step_all_s": intervals,
        "finish_s": run["wall_s"] - times[-1],
        "ranks_cpu_per_step_s": ranks_cpu_per_step,
        "launcher_cpu_per_step_s": launcher_cpu_per_step,
        "simulated_step_ms": statistics.median([ms for _, _, ms in steps][WARMUP_STEPS:]),
        "simulated_step_ms_all": [ms for _, _, ms in steps],
        "script_result": run["result"],
        "peak_rss_sum_bytes": stats.peak_rss_sum,
        "peak_footprint_bytes": stats.peak_footprint,
        "peak_pss_sum_bytes": stats.peak_pss_sum,
        "pss_sweeps": stats.pss_sweeps,
        "largest_rank_rss_bytes": max(stats.rank_hwm.values(), default=0),
        "mean_rank_rss_bytes": statistics.mean(stats.rank_hwm.values()) if stats.rank_hwm else 0,
        "launcher_rss_bytes": stats.launcher_hwm,
        "peak_processes": stats.peak_processes,
        "samples": stats.samples,
        "timeline": [(round(t, 2), rss, fp, round(rc, 2), round(lc, 2))
                     for t, rss, fp, rc, lc in stats.timeline[:: max(1, int(args.hz / 2))]],
        "timeline_columns": ["t_s", "rss_sum_bytes", "footprint_bytes", "ranks_cpu_s", "launcher_cpu_s"],
        "pss_timeline": stats.pss_timeline,
        "coordinator_records": summary.get("simulator_records"),
        "kernels": summary.get("kernels"),
        "nccl_calls": summary.get("nccl_calls"),
        "summary_wall_s": summary.get("simulator_wall_s"),
        "summary_cpu_s": summary.get("simulator_cpu_s"),
        "summary_peak_rss_gib": summary.get("simulator_peak_rss_gib"),
        "summary_launcher_peak_rss_gib": summary.get("launcher_peak_rss_gib"),
        "simulated_time_s": summary.get("simulated_time_s"),
        "machine_cpu_s": run["machine_cpu_s"],
        "sampler_cpu_s": run["sampler_cpu_s"],
        "others_cpu_s": max(0.0, run["machine_cpu_s"] - run["sampler_cpu_s"] - (summary.get("simulator_cpu_s") or 0.0)),
    }
    row["others_load"] = row["others_cpu_s"] / row["wall_s"]  # cores busy with other work, on average
    if args.diff_steps:
        longer = workload.steps + args.diff_steps
        command2 = torchrun_command(ranks, workload, str(out), longer, args)
        print(f"   cross-check: {longer} steps", flush=True)
        run2 = run_once(command2, hz=args.hz, pss_interval_s=args.pss_interval, log=scratch / f"stderr{ranks}b.log",
                        step_of=workload.step_of)
        row["diff_steps"] = args.diff_steps
        row["wall_s_longer"] = run2["wall_s"]
        row["wall_per_step_by_difference_s"] = (run2["wall_s"] - run["wall_s"]) / args.diff_steps
        times2 = [t for _, t, _ in run2["steps"]]
        row["wall_per_step_longer_all_s"] = [b - a for a, b in zip(times2, times2[1:])]
        row["to_first_step_longer_s"] = times2[0] if times2 else None
    print(f"   wall {row['wall_s']:.1f} s, {per_step_s:.2f} s/step, peak RSS sum {stats.peak_rss_sum / GIB:.2f} GiB",
          flush=True)
    return row


def baseline(args: argparse.Namespace, scratch: Path) -> dict:
    """One rank, an empty program: the fixed cost of a rank process."""
    script = scratch / "empty.py"
    script.write_text("")
    command = [*PHANTORA, "run", "--gpu", "h200", "--out", str(scratch / "out_empty"), "--no-progress", "--",
               "python", str(script)]
    print("-- baseline: one rank, empty program", flush=True)
    run = run_once(command, hz=args.hz, pss_interval_s=args.pss_interval, log=scratch / "stderr_empty.log")
    stats = run["stats"]
    return {"command": command[2:], "wall_s": run["wall_s"], "rank_rss_bytes": max(stats.rank_hwm.values(), default=0),
            "launcher_rss_bytes": stats.launcher_hwm, "peak_rss_sum_bytes": stats.peak_rss_sum,
            "peak_footprint_bytes": stats.peak_footprint}


# --- output ---------------------------------------------------------------------------------------
def machine() -> dict:
    mem_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    import torch
    return {"cpus": os.cpu_count(), "cpu_model": model, "mem_gib": round(mem_kib / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "torch": torch.__version__,
            "load_avg_at_start": os.getloadavg()}


def print_table(rows: list[dict], base: dict | None) -> None:
    g = lambda b: b / GIB  # noqa: E731
    head = (f"{'ranks':>5} {'procs':>5} {'wall s':>7} {'startup s':>9} {'s/step':>7} {'finish s':>8} {'CPU s/step':>10} "
            f"{'(coord)':>7} {'sim ms/step':>11} {'records':>9} {'RSS sum':>8} {'footprint':>9} {'PSS sum':>8} "
            f"{'max rank':>8} {'launcher':>8} {'other load':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        rec = r["coordinator_records"]
        print(f"{r['ranks']:>5} {r.get('processes', r['ranks']):>5} {r['wall_s']:>7.1f} {r['to_first_step_s']:>9.1f} {r['wall_per_step_s']:>7.2f} "
              f"{r['finish_s']:>8.1f} {r['ranks_cpu_per_step_s'] + r['launcher_cpu_per_step_s']:>10.2f} "
              f"{r['launcher_cpu_per_step_s']:>7.2f} {r['simulated_step_ms']:>11.2f} "
              f"{rec if rec is not None else '-':>9} {g(r['peak_rss_sum_bytes']):>8.2f} "
              f"{g(r['peak_footprint_bytes']):>9.2f} {g(r['peak_pss_sum_bytes']):>8.2f} "
              f"{g(r['largest_rank_rss_bytes']):>8.3f} {g(r['launcher_rss_bytes']):>8.3f} {r['others_load']:>10.2f}")
    print("memory in GiB (peaks); startup = launch to rank 0's step-0 line; CPU s/step: ranks + launcher, "
          "(coord) = launcher alone; other load = cores busy with other processes of the machine, on average")
    for r in rows:
        if "wall_per_step_by_difference_s" in r:
            print(f"cross-check, {r['ranks']} ranks: (wall({r['diff_steps']} more steps) - wall) / "
                  f"{r['diff_steps']} = {r['wall_per_step_by_difference_s']:.2f} s/step "
                  f"(step lines: {r['wall_per_step_s']:.2f})")
    if base:
        print(f"baseline, one rank with an empty program: {base['wall_s']:.1f} s wall, rank "
              f"{g(base['rank_rss_bytes']):.3f} GiB, launcher {g(base['launcher_rss_bytes']):.3f} GiB")


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = [r["ranks"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    a.plot(ranks, [r["wall_per_step_s"] for r in rows], "o-", label="wall / simulated step")
    a.plot(ranks, [r["ranks_cpu_per_step_s"] + r["launcher_cpu_per_step_s"] for r in rows], "s--",
           label="CPU / step (all processes)")
    a.plot(ranks, [r["launcher_cpu_per_step_s"] for r in rows], "^:", label="CPU / step (launcher)")
    a.plot(ranks, [r["to_first_step_s"] for r in rows], "d-.", label="startup (launch to step 0)")
    a.set_title("time, s")
    a.set_yscale("log")
    b.plot(ranks, [r["peak_rss_sum_bytes"] / GIB for r in rows], "o-", label="RSS sum (peak)")
    b.plot(ranks, [r["peak_footprint_bytes"] / GIB for r in rows], "s--", label="footprint: anon sum + shared")
    b.plot(ranks, [r["peak_pss_sum_bytes"] / GIB for r in rows], "x:", label="PSS sum (sampled)")
    b.plot(ranks, [r["largest_rank_rss_bytes"] / GIB for r in rows], "^-", label="largest rank")
    b.plot(ranks, [r["launcher_rss_bytes"] / GIB for r in rows], "v-", label="launcher")
    b.set_title("host memory, GiB")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks, [str(r) for r in ranks])
        ax.set_xlabel("ranks (simulated GPUs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _title(w: dict, machine: dict) -> str:
    # results written before workloads had titles are the Llama workload's
    what = w.get("title") or Workload(**{f.name: w[f.name] for f in fields(Workload) if f.name in w}).title()
    return f"{what}; {machine['cpus']} CPUs, {machine['mem_gib']} GiB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,8,32", help="comma-separated rank counts (default 2,8,32)")
    p.add_argument("--workload", choices=["llama", "torchtitan"], default="llama",
                   help="benchmarks/workloads/llama_train.py (default), or TorchTitan's Llama 3.1 8B FSDP, unmodified")
    p.add_argument("--parallel", choices=["fsdp", "ddp"], default="fsdp")
    p.add_argument("--model", choices=sorted(MODELS), help="a model's shape (overrides --dim ... --seq)")
    p.add_argument("--gpu", default="h200", help="the simulated GPU (default h200)")
    p.add_argument("--cluster", type=Path, help="a cluster file for phantora's --cluster (instead of --gpu), e.g. "
                   "benchmarks/e2e/published/h100_96gb_grand_teton.toml, the GPUs of TorchTitan's published runs "
                   "(grown to as many nodes as a run takes)")
    p.add_argument("--simulate", choices=["auto", "all"], default="auto",
                   help="phantora's --ranks: representative ranks where the program allows (auto), or every rank")
    p.add_argument("--host-contention", default="h200-vm", help="phantora's --host-contention (default h200-vm)")
    p.add_argument("--steps", type=int, default=6, help=f"training steps per run (> {WARMUP_STEPS + 1})")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--n-layers", type=int, default=8)
    p.add_argument("--n-heads", type=int, default=16)
    p.add_argument("--n-kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=3584)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--trace", action=argparse.BooleanOptionalAction, default=True,
                   help="write trace.json as a user's run does (default on)")
    p.add_argument("--diff-steps", type=int, default=0,
                   help="also run steps+N steps and report (wall difference)/N per step")
    p.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="measure one rank with an empty program first")
    p.add_argument("--hz", type=float, default=20.0, help="memory samples per second")
    p.add_argument("--pss-interval", type=float, default=5.0, help="seconds between PSS sweeps")
    p.add_argument("--name", default="scale", help="results go to <out-dir>/<name>.json and <name>.png")
    p.add_argument("--out-dir", type=Path, default=OUT_DIR)
    p.add_argument("--replot", type=Path, metavar="JSON", help="only print the table and plot of earlier results")
    args = p.parse_args()
    if args.replot:
        doc = json.loads(args.replot.read_text())
        print_table(doc["runs"], doc["baseline"])
        plot(doc["runs"], args.replot.with_suffix(".png"), _title(doc["workload"], doc["machine"]))
        return 0
    if args.steps <= WARMUP_STEPS + 1:
        p.error(f"--steps must be more than {WARMUP_STEPS + 1}")
    shape = dict(dim=args.dim, n_layers=args.n_layers, n_heads=args.n_heads, n_kv_heads=args.n_kv_heads,
                 ffn_dim=args.ffn_dim, vocab=args.vocab, seq=args.seq, batch=args.batch)
    workload = (TorchTitanWorkload(steps=args.steps) if args.workload == "torchtitan" else
                Workload(parallel=args.parallel, steps=args.steps, **{**shape, **MODELS.get(args.model, {})}))
    rank_counts = [int(r) for r in args.ranks.split(",")]
    for r in rank_counts:
        layout(r)
    info = machine()
    with tempfile.TemporaryDirectory(prefix="phantora-scale-") as tmp:
        scratch = Path(tmp)
        base = baseline(args, scratch) if args.baseline else None
        rows = [measure(r, workload, args, scratch) for r in rank_counts]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "scale", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": info, "workload": {"program": workload.name, **asdict(workload), "title": workload.title()},
           "gpu": args.gpu, "cluster": str(args.cluster) if args.cluster else None, "simulate": args.simulate,
           "host_contention": args.host_contention,
           "warmup_steps": WARMUP_STEPS, "trace": args.trace, "hz": args.hz, "pss_interval_s": args.pss_interval,
           "baseline": base, "runs": rows}
    json_path = args.out_dir / f"{args.name}.json"
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print_table(rows, base)
    plot(rows, args.out_dir / f"{args.name}.png", _title(doc["workload"], info))
    print(f"wrote {json_path} and {json_path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
