"""Accuracy ground truth: run the training configurations on real GPUs, one JSON each.

Runs on the GPU machine (4x H200), from the repo root:

    python3 -m benchmarks.e2e.groundtruth --out $OUT [--only NAME,NAME] [--deadline-s 540]

Each configuration is launched exactly as a user would (`python3 SCRIPT ARGS` for one GPU,
`torchrun --standalone --nproc_per_node=W SCRIPT ARGS` otherwise; torchrun is invoked as
`python3 -m torch.distributed.run`, the same program) with CUDA_VISIBLE_DEVICES picking its
GPUs. Configurations of one "wave" run at the same time on disjoint GPUs (four 1-GPU runs, or
two 2-GPU runs on the NVLink pairs 0,1 and 2,3); every 4-GPU run and the launch-bound 1-GPU
runs have the machine to themselves. Each result file records what ran beside it.

Output: $OUT/groundtruth.tar.gz (re-written after every configuration, so a run cut short
still returns what finished) holding groundtruth/NAME.json, logs/NAME.log, overlap/*.json,
env.json; and $OUT/runner.log. Unpack into data/<gpu>/e2e/groundtruth/ (its README.md) with
benchmarks/e2e/collect.py. On the GPU machine (TorchTitan's wheels beside the checkout):
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1;
    python3 -m benchmarks.e2e.groundtruth --out $OUT --deadline-s 540 2>&1 | tee $OUT/runner.log
then, here: python -m benchmarks.e2e.collect import LEASE/RUN $OUT/groundtruth.tar.gz (benchmarks/e2e/measure.sh
does both halves' bookkeeping).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
W = "benchmarks/workloads"
L1B = "--dim 2048 --n-layers 16 --n-heads 32 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096".split()
L3B = "--dim 3072 --n-layers 28 --n-heads 24 --n-kv-heads 8 --ffn-dim 8192 --vocab 128256 --seq 4096".split()
L8B = "--dim 4096 --n-layers 32 --n-heads 32 --n-kv-heads 8 --ffn-dim 14336 --vocab 128256 --seq 8192".split()
TT_DATA = "/tmp/c4_synthetic"
TT = f"{W}/torchtitan"


def cfg(name, script, world, args, *, wave, est_s, timeout=150, module=False, note=""):
    return {"name": name, "script": script, "world": world, "args": args, "wave": wave, "est_s": est_s,
            "timeout": timeout, "module": module, "note": note}


def s(x):
    return x.split()


CONFIGS = [
    # 1 GPU, four GPU-bound runs side by side (one per GPU)
    cfg("llama_l1b_1gpu", "llama_train.py", 1, s("--parallel none --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="1gpu_a", est_s=30),
    cfg("llama_l1b_ac_1gpu", "llama_train.py", 1, s("--parallel none --ac full") + L1B + s("--batch 4 --steps 12"),
        wave="1gpu_a", est_s=30),
    cfg("llama_l1b_ga4_1gpu", "llama_train.py", 1,
        s("--parallel none --ac none") + L1B + s("--batch 1 --grad-accum 4 --steps 12"), wave="1gpu_a", est_s=30),
    cfg("llama_l3b_1gpu", "llama_train.py", 1, s("--parallel none --ac none") + L3B + s("--batch 1 --steps 12"),
        wave="1gpu_a", est_s=30, note="dev-set config, re-measured (ran beside three other 1-GPU runs)"),
    # 1 GPU, launch-bound / small, alone
    cfg("nanogpt_124m_1gpu", "nanogpt_train.py", 1, s("--steps 15"), wave="nanogpt_124m", est_s=20),
    cfg("nanogpt_tiny_1gpu", "nanogpt_train.py", 1,
        s("--layers 4 --d-model 256 --heads 4 --block 256 --batch 4 --steps 30"), wave="nanogpt_tiny", est_s=15),
    cfg("llama_tiny_1gpu", "llama_train.py", 1,
        s("--parallel none --ac none --dim 512 --n-layers 4 --n-heads 8 --n-kv-heads 4 --ffn-dim 1536 --vocab 32000 "
          "--seq 512 --batch 2 --steps 30"), wave="llama_tiny", est_s=15),
    # 2 GPUs, two runs side by side (GPUs 0,1 and 2,3)
    cfg("llama_l1b_ddp2", "llama_train.py", 2, s("--parallel ddp --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="2gpu_a", est_s=30),
    cfg("llama_l1b_fsdp2", "llama_train.py", 2, s("--parallel fsdp --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="2gpu_a", est_s=30),
    cfg("llama_l1b_tp2", "llama_train.py", 2, s("--parallel tp --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="2gpu_b", est_s=30),
    cfg("llama_l1b_pp2_1f1b", "llama_pp.py", 2, s("--schedule 1f1b --microbatches 8") + L1B + s("--batch 8 --steps 12"),
        wave="2gpu_b", est_s=35),
    # 4 GPUs, alone
    cfg("llama_l1b_fsdp4", "llama_train.py", 4, s("--parallel fsdp --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="l1b_fsdp4", est_s=25, note="dev-set config, re-measured"),
    cfg("llama_l1b_ddp4", "llama_train.py", 4, s("--parallel ddp --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="l1b_ddp4", est_s=25),
    cfg("llama_l3b_fsdp4", "llama_train.py", 4, s("--parallel fsdp --ac none") + L3B + s("--batch 2 --steps 12"),
        wave="l3b_fsdp4", est_s=30),
    cfg("llama_l3b_fsdp4_ac", "llama_train.py", 4, s("--parallel fsdp --ac full") + L3B + s("--batch 2 --steps 12"),
        wave="l3b_fsdp4_ac", est_s=35),
    cfg("llama_l1b_tp4", "llama_train.py", 4, s("--parallel tp --ac none") + L1B + s("--batch 2 --steps 12"),
        wave="l1b_tp4", est_s=25),
    cfg("llama_l1b_fsdp2_tp2", "llama_train.py", 4,
        s("--parallel fsdp_tp --tp 2 --ac none") + L1B + s("--batch 2 --steps 12"), wave="l1b_fsdp2_tp2", est_s=25),
    cfg("llama_l1b_pp4_gpipe", "llama_pp.py", 4, s("--schedule gpipe --microbatches 8") + L1B + s("--batch 8 --steps 12"),
        wave="pp4_gpipe", est_s=30),
    cfg("llama_l1b_pp4_1f1b", "llama_pp.py", 4, s("--schedule 1f1b --microbatches 8") + L1B + s("--batch 8 --steps 12"),
        wave="pp4_1f1b", est_s=30),
    cfg("llama_l1b_fsdp4_ga4", "llama_train.py", 4,
        s("--parallel fsdp --ac none") + L1B + s("--batch 1 --grad-accum 4 --steps 12"), wave="l1b_fsdp4_ga4", est_s=30),
    cfg("moe_ep4", "moe_a2a.py", 4, s("--dim 2048 --ffn-dim 4096 --experts 8 --top-k 2 --n-layers 8 --tokens 8192 --steps 12"),
        wave="moe_ep4", est_s=25),
    cfg("torchtitan_llama3_8b_fsdp4", "torchtitan.train", 4,
        s(f"--job.config_file {TT}/llama3_8b.toml --job.dump_folder /tmp/tt_out --model.hf_assets_path {TT} "
          f"--training.dataset c4_test --training.dataset_path {TT_DATA} --training.local_batch_size 2 "
          "--training.seq_len 8192 --training.steps 10 --lr_scheduler.warmup_steps 2 "
          "--parallelism.data_parallel_shard_degree 4 --activation_checkpoint.mode selective "
          "--activation_checkpoint.selective_ac_option op --compile.no-enable --checkpoint.no-enable "
          "--profiling.no-enable-profiling --metrics.log_freq 1 --metrics.no-enable-tensorboard --validation.no-enable"),
        wave="torchtitan", est_s=75, timeout=200, module=True,
        note="TorchTitan 0.2.2 (wheels carried in .whl), per shared/reference/torchtitan/README.md, 10 steps"),
    cfg("llama_l8b_fsdp4", "llama_train.py", 4, s("--parallel fsdp --ac none") + L8B + s("--batch 1 --steps 9"),
        wave="l8b_fsdp4", est_s=40, note="dev-set config, re-measured (9 steps)"),
]


def command_words(c):
    """The command as a user types it (torchrun for several GPUs)."""
    target = ["-m", c["script"]] if c["module"] else [f"{W}/{c['script']}"]
    if c["world"] == 1:
        return ["python3", *target, *c["args"]]
    return ["torchrun", "--standalone", f"--nproc_per_node={c['world']}", *target, *c["args"]]


def launch_words(c):
    words = command_words(c)
    if words[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *words[1:]]
    return [sys.executable, *words[1:]]


def spread(xs):
    xs = sorted(xs)
    return {"median": xs[len(xs) // 2], "min": xs[0], "max": xs[-1], "mean": statistics.fmean(xs),
            "stdev": statistics.pstdev(xs), "n": len(xs)}


ANSI = re.compile(r"\x1b\[[0-9;]*m")
TT_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*([\d.naif]+)\s+grad_norm:\s*([\d.naif]+)\s+memory:\s*([\d.]+)GiB\(([\d.]+)%\)"
                     r"\s+tps:\s*([\d,]+)\s+tflops:\s*([\d,.]+)\s+mfu:\s*([\d.]+)%")


def torchtitan_tokens_per_device(words: list[str]) -> float:
    """The tokens one logged tokens/s of TorchTitan counts per step: its local batch (one data-parallel rank's) over
    the devices that share it (TorchTitan divides by context x tensor x pipeline parallel degrees)."""
    def option(name, default):
        return int(words[words.index(name) + 1]) if name in words else default
    shared_by = (option("--parallelism.context_parallel_degree", 1) * option("--parallelism.tensor_parallel_degree", 1)
                 * option("--parallelism.pipeline_parallel_degree", 1))
    return option("--training.local_batch_size", None) * option("--training.seq_len", None) / shared_by


def parse(c, text):
    """The script's own final JSON line, or, for TorchTitan, its per-step log lines."""
    if c["module"]:
        rows = []
        for line in ANSI.sub("", text).splitlines():
            m = TT_STEP.search(line)
            if m:
                step, loss, gn, mem, mem_pct, tps, tflops, mfu = m.groups()
                rows.append({"step": int(step), "loss": float(loss), "memory_reserved_gib": float(mem),
                             "tps": int(tps.replace(",", "")), "tflops": float(tflops.replace(",", "")), "mfu": float(mfu)})
        if not rows:
            return None
        tokens = torchtitan_tokens_per_device(c["args"])
        by_step: dict[int, list] = {}
        for r in rows:  # every rank logs its own line per step
            by_step.setdefault(r["step"], []).append(r)
        steps = sorted(by_step)
        times = [statistics.fmean(tokens / r["tps"] for r in by_step[st]) for st in steps]
        steady = sorted(times[3:])
        return {"script": "torchtitan.train", "world": c["world"], "steps_logged": steps, "step_s_all": times,
                "step_s_median": steady[len(steady) // 2] if steady else None,
                "max_mem_reserved_gib": max(r["memory_reserved_gib"] for r in rows),
                "max_mem_alloc_gib": None, "mfu_pct_median": statistics.median(r["mfu"] for st in steps[3:] for r in by_step[st])
                if len(steps) > 3 else None, "rank_lines": rows,
                "note": "step time = local_batch*seq / logged tps, averaged over the ranks' log lines of the step "
                        "(TorchTitan times each step with perf_counter between its log lines, log_freq 1); memory = "
                        "its logged per-step peak reserved (reset every step), max over steps and ranks; TorchTitan "
                        "logs no allocated peak"}
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith('{"script"'):
            return json.loads(line)
    return None


def env_info():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout
        except Exception as e:  # noqa: BLE001
            return f"failed: {e}"
    probe = ("import torch,json;v=torch.cuda.nccl.version();print(json.dumps({'torch':torch.__version__,"
             "'cuda':torch.version.cuda,'cudnn':torch.backends.cudnn.version(),'nccl':'.'.join(map(str,v)) "
             "if isinstance(v,tuple) else str(v),'gpus':[torch.cuda.get_device_name(i) for i in "
             "range(torch.cuda.device_count())]}))")
    return {"nvidia_smi": sh("nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,"
                             "power.limit,temperature.gpu,driver_version,pci.bus_id --format=csv"),
            "topo": sh("nvidia-smi topo -m"), "python": sys.version,
            "torch": json.loads(sh(f'{sys.executable} -c "{probe}"') or "{}"),
            "cpu": sh("nproc; grep -m1 'model name' /proc/cpuinfo"), "uname": sh("uname -a"),
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                    "NVSHMEM_DISABLE_NVLS")}}


class Bundle:
    """Files for $OUT/groundtruth.tar.gz, re-written after every addition."""

    def __init__(self, out: Path):
        self.path, self.files = out / "groundtruth.tar.gz", {}

    def add(self, name, data):
        self.files[name] = data.encode() if isinstance(data, str) else data
        tmp = self.path.with_suffix(".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            for n, d in self.files.items():
                info = tarfile.TarInfo(n)
                info.size, info.mtime = len(d), int(time.time())
                tar.addfile(info, io.BytesIO(d))
        tmp.replace(self.path)


def setup_torchtitan():
    site = "/tmp/tt_site"
    whl = sorted(str(p) for p in (REPO / ".whl").glob("*.whl"))
    if not whl:
        return None, "no wheels carried (.whl)"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", site, *whl], capture_output=True, text=True)
    if done.returncode:
        return None, "pip install failed: " + done.stderr[-2000:]
    os.makedirs(TT_DATA, exist_ok=True)
    subprocess.run([sys.executable, f"{REPO}/{TT}/make_synthetic_c4.py", f"{TT_DATA}/data.json"], check=True)
    return site, None


def run_wave(wave, configs, bundle, t0):
    gpus_per = configs[0]["world"]
    procs = []
    busy = gpu_apps()
    if busy:
        print(f"WARNING: GPU processes before wave {wave}: {busy}", flush=True)
    for i, c in enumerate(configs):
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i * gpus_per + g) for g in range(gpus_per))
        if c["module"]:
            env["PYTHONPATH"] = c["_site"] + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = open(f"/tmp/gt_{c['name']}.log", "w")
        started = time.time()
        proc = subprocess.Popen(launch_words(c), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append((c, proc, log, started, env["CUDA_VISIBLE_DEVICES"]))
    for c, proc, log, started, visible in procs:
        try:
            rc = proc.wait(timeout=max(5, c["timeout"] - (time.time() - started)))
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            rc = "timeout"
        log.close()
        wall = time.time() - started
        text = Path(f"/tmp/gt_{c['name']}.log").read_text(errors="replace")
        try:
            result = parse(c, text)
        except Exception as e:  # noqa: BLE001
            result, text = None, text + f"\n[groundtruth.py] parse failed: {e!r}"
        rec = {k: c[k] for k in ("name", "script", "world", "args", "wave", "note")}
        rec.update({
            "command": shlex.join(command_words(c)), "cuda_visible_devices": visible,
            "concurrent_with": [o["name"] for o in configs if o is not c], "returncode": rc, "wall_s": wall,
            "started_unix": started, "gpu_processes_before": busy, "ok": rc == 0 and result is not None and result.get("step_s_median") is not None,
        })
        if result is not None and result.get("step_s_all"):
            rec["step_ms_all"] = [1e3 * t for t in result["step_s_all"]]
            rec["step_ms_warmup_excluded"] = 3
            rec["step_ms"] = spread(rec["step_ms_all"][3:])
            rec["max_mem_allocated_gib"] = result.get("max_mem_alloc_gib")
            rec["max_mem_reserved_gib"] = result.get("max_mem_reserved_gib")
        rec["result"] = result
        rec["log_tail"] = text[-6000:]
        bundle.add(f"groundtruth/{c['name']}.json", json.dumps(rec, indent=1))
        bundle.add(f"logs/{c['name']}.log", text[-200000:])
        sm = rec.get("step_ms", {})
        print(f"[{time.time() - t0:6.1f}s] {c['name']:<28} rc={rc} wall {wall:5.1f}s  step ms median "
              f"{sm.get('median', float('nan')):8.1f} [{sm.get('min', float('nan')):.1f}-{sm.get('max', float('nan')):.1f}]"
              f"  reserved {rec.get('max_mem_reserved_gib') or float('nan'):.2f} GiB", flush=True)
        if not rec["ok"]:
            print("\n".join(text.splitlines()[-15:]), flush=True)


def kill_tree(proc):
    """Kill torchrun and its workers (torchrun starts each worker in a session of its own)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, todo = [], [proc.pid]
    while todo:
        pid = todo.pop()
        kids = [c for c, pp in parent.items() if pp == pid]
        tree += kids
        todo += kids
    for pid in tree:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    proc.kill()
    proc.wait()


def gpu_apps():
    try:
        return subprocess.run("nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader",
                              shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"failed: {e}"


def run_overlap(world, bundle, t0, timeout=75):
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(world))
    out = f"/tmp/overlap_{world}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           "benchmarks/collectives/measure_overlap.py", "--out", out]
    started = time.time()
    logpath = f"/tmp/overlap_{world}.log"
    with open(logpath, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            rc = "timeout"
    text = Path(logpath).read_text(errors="replace")
    bundle.add(f"overlap/overlap_{world}.log", text[-100000:])
    if os.path.exists(out):
        bundle.add(f"overlap/overlap_{world}.json", Path(out).read_text())
    print(f"[{time.time() - t0:6.1f}s] overlap world {world}: rc={rc} {time.time() - started:.1f}s", flush=True)
    print("\n".join(text.splitlines()[-30:]), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="comma-separated config names (default: all)")
    p.add_argument("--skip", default="", help="comma-separated config names to leave out")
    p.add_argument("--overlap-before", default="torchtitan",
                   help="run the overlap measurement before this wave ('none': not at all; unknown: at the end)")
    p.add_argument("--deadline-s", type=float, default=540, help="start nothing that would end after this")
    p.add_argument("--list", action="store_true")
    a = p.parse_args()
    t0 = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    skip = set(filter(None, a.skip.split(",")))
    configs = [c for c in CONFIGS if (not only or c["name"] in only) and c["name"] not in skip]
    if a.list:
        for c in configs:
            print(c["wave"], shlex.join(command_words(c)))
        return 0
    bundle = Bundle(out)
    env = env_info()
    env["gpu_processes_at_start"] = gpu_apps()
    bundle.add("env.json", json.dumps(env, indent=1))
    print(env["nvidia_smi"], env["torch"], flush=True)
    waves: dict[str, list] = {}
    for c in configs:
        waves.setdefault(c["wave"], []).append(c)
    order = list(waves)
    if a.overlap_before != "none":
        order.insert(order.index(a.overlap_before) if a.overlap_before in order else len(order), "OVERLAP")
    for wave in order:
        if wave == "OVERLAP":
            for world in (2, 4):
                if time.time() - t0 + 40 > a.deadline_s:
                    print(f"skipped overlap world {world} (deadline)", flush=True)
                    continue
                run_overlap(world, bundle, t0)
            continue
        members = waves[wave]
        est = max(c["est_s"] for c in members)
        if time.time() - t0 + est > a.deadline_s:
            print(f"[{time.time() - t0:6.1f}s] skipped wave {wave} (deadline): {[c['name'] for c in members]}", flush=True)
            continue
        if any(c["module"] for c in members):
            site, err = setup_torchtitan()
            if err:
                print(f"torchtitan setup failed: {err}", flush=True)
                bundle.add("groundtruth/torchtitan_setup_error.txt", err)
                continue
            for c in members:
                c["_site"] = site
        run_wave(wave, members, bundle, t0)
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
