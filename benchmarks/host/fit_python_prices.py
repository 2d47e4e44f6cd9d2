"""Fit the library Python prices (models/python_prices.py Note [Library Python]) to cProfile statistics of framework
programs' steady steps on the reference hosts, and write them to src/phantora/specs/h200/python_prices.json.

    python -m benchmarks.host.fit_python_prices [--data DIR] [--specs DIR] [--dry-run]
    python -m benchmarks.host.fit_python_prices --simulate [NAME ...]   # the profiled programs, measured vs simulated

Reads every `<name>.profiled.rank<R>.pstats` of data/h200/host/python_profiles/ (benchmarks/host/python_profiles.sh),
with its JSON: the optimizer steps profiled, cProfile's own cost per call (a calibration at the process's start), and
a host-speed probe after each profiled step (a fixed pure-Python loop). For each function of a priced library:

1. its own time less cProfile's own cost. That cost was calibrated before the steps, on a host whose speed then
   (the calibration's plain loop) may differ from the steps' (their probes): it is brought to the steps' speed, and
   to what a call costs in situ, where it is several times the calibration's (`in_situ_ratio`: the runs profiled
   every other step, `<name>.alternate.*`);
2. plus the Python it runs that the host model has no term for: the own time of the torch and standard-library
   functions it calls, and of their callees in turn (not ops, waits or module calls, which the model charges),
   shared out among their callers in proportion to the time each call took (cProfile keeps one level of callers);
3. brought to the host the other constants stand for: the mean lent H200 host, the uncontended probe's time times
   the contention model's mean slowdown (specs/h200/host_contention.json), over the steps' mean probe;
4. per call: the median over the profiles and ranks that ran it (a function that waited for the GPU in one program,
   its launch queue full, does not set its price by that).

Then per file and name (another version's lines), and per library: the mean over all its calls. Priced libraries:
every site package but torch's own, whose Python the host model's other terms charge (module calls, optimizers,
FSDP's hooks), and the modules of torch no term charges (PRICED_TORCH), of which the profiles ran at least
MIN_FUNCTIONS functions, so that its mean can stand for the functions they never ran (not numpy, of which they ran
one, nor the import hooks of the measuring machine's environment); a module's `forward` is a module call's
(`module_call_ns`) and is not priced, but an autograd Function's `forward`, which its `apply` calls, is (priced by its
line alone: `PythonPrices.price_ns`).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from benchmarks.common.fitted import fit_parser, update_fitted
from benchmarks.common.paths import BENCHMARKS, data_dir, relative
from benchmarks.e2e.frameworks.accuracy import error_pct, simulate
from benchmarks.e2e.frameworks.probed import at_host_scale, host_scale
from benchmarks.host.fit_contention import THRESHOLD_US, uncontended_probe_us
from benchmarks.host.summarize_python_profiles import (Function, Profile, in_situ_ratio, is_c10d_call, library_of,
                                                      portable, step_ms)
from phantora.models.python_prices import MODULE_CALL

DATA = data_dir("h200", "host", "python_profiles")
MORE_PROFILES = ("torchtitan", "checkpointing")
"""Subfolders whose profiles the prices read beside the folder's own: TorchTitan's programs and a Transformers Trainer
with activation checkpointing, taken on other leases.
cProfile's cost in situ, its calibration's uncontended loop and `collective_ns` (fit_collective_calls.py) are the
folder's own programs' alone: TorchTitan's
alternating runs (1.3-2.8x) would move the median ratio to 2.9x, every library's prices and the c10d call's cost with
it, and so every framework row and the fits that simulate (docs/models/host.md, Library Python)."""
CONFIGS = BENCHMARKS / "host" / "python_profiles.json"
SIMULATED_STEPS = 12
UNPRICED = frozenset({"torch", "functorch", "torchgen", "triton", "builtin", "stdlib", "other", "examples"})
"""Code the host model charges by other terms (torch's Python), or that is not a site package."""
PRICED_TORCH = ("torch/utils/checkpoint.py",)
"""torch's modules whose Python no term of the host model charges, priced each as a library of its own (models/
python_prices.py Note [Library Python]): activation checkpointing's hooks and selective checkpointing's dispatch
modes, which run per op and per saved tensor."""
MIN_FUNCTIONS = 20
"""Functions of a library the profiles must have run for the library to be priced."""
TORCH_CHARGED_APART = ("torch/nn/modules/module.py", "torch/optim/", "torch/utils/data/", "torch/nn/utils/clip_grad.py",
                       "torch/distributed/fsdp/", "torch/distributed/tensor/")
"""torch's Python that the host model charges itself (module calls, optimizers, the DataLoader, clipping, FSDP2,
DTensor; and c10d's collective calls, `is_c10d_call`): no part of it is added to the library function that calls
it."""
TOKENIZER_ENCODE = re.compile(r"method 'encode(?:_batch(?:_fast)?)?' of 'tokenizers\.Tokenizer'")
"""Hugging Face tokenizers' encoders, charged per character and token (models/host.py Note [Tokenizing on the host])."""
WAITS = ("synchronize", "wait", "item", "_local_scalar_dense", "acquire", "sleep", "select", "poll")
"""C functions that wait (for the GPU, a lock, another process): the model times waits itself."""


FUNCTION_APPLY = ("<built-in method apply>", "torch/amp/autocast_mode.py")
"""What calls an autograd Function's `forward`: its `apply` (C), directly or through autocast's `custom_fwd`."""


def priced_library(function: Function, stats: dict) -> bool:
    """Whether `function` is a priced library's and priced by itself (not a module's forward: a module call's)."""
    if function[2] == MODULE_CALL and not called_by_apply(function, stats):
        return False
    return library_of(function) not in UNPRICED or portable(function)[0] in PRICED_TORCH


def called_by_apply(function: Function, stats: dict) -> bool:
    """Whether every call of `function` came from an autograd Function's `apply` (FUNCTION_APPLY)."""
    callers = stats[function][4]
    return bool(callers) and all(name == FUNCTION_APPLY[0] or file.endswith(FUNCTION_APPLY[1])
                                 for file, _, name in callers)


def library_key(file: str) -> str:
    """The priced library of a file relative to the site packages: its top-level package, or the file for
    PRICED_TORCH's (PythonPrices.library_of)."""
    return file if file in PRICED_TORCH else file.partition("/")[0]


def mean_host_slowdown(specs: Path) -> float:
    """How much slower than uncontended the mean contended host is (models/host_contention.py)."""
    constants = json.loads((specs / "h200" / "host_contention.json").read_text())["constants"]
    return 1.0 + constants["contended_fraction"] * (constants["contended_factor"] - 1.0)


def to_mean_host(probe_us: float, specs: Path) -> float:
    """By how much a time measured on a host whose probe took `probe_us` grows on the mean contended host: the
    uncontended hosts' probe over it, times the mean host's slowdown."""
    return uncontended_probe_us() * mean_host_slowdown(specs) / probe_us


def uncontended_loop_ns(runs: list[Profile], probe_unc_us: float) -> float:
    """The calibration's plain loop on an uncontended host: the median of those within the probe's contention
    threshold of the fastest."""
    loops = sorted(r.calibration_loop_ns for r in runs)
    return statistics.median(x for x in loops if x < loops[0] * THRESHOLD_US / probe_unc_us)


def overhead_scale(run: Profile, probe_unc_us: float, loop_unc_ns: float) -> float:
    """By how much cProfile's calibrated cost per call grows from the calibration's host speed to the steps'."""
    return (run.probe_us / probe_unc_us) / (run.calibration_loop_ns / loop_unc_ns)


def own_ns_per_step(run: Profile, scale: float) -> dict[Function, tuple[float, float]]:
    """function -> (calls, own ns less cProfile's cost at the steps' speed), per step."""
    return {function: (calls / run.steps, corrected_ms * 1e6 / run.steps)
            for function, calls, _, corrected_ms in run.functions(scale)}


def charged_by_model(function: Function) -> bool:
    """Code whose time the model charges by a term of its own: ops and waits (C), torch's modelled Python."""
    if library_of(function) == "builtin":
        name = function[2]
        return "torch" in name or any(w in name for w in WAITS) or TOKENIZER_ENCODE.search(name) is not None
    return any(part in function[0] for part in TORCH_CHARGED_APART) or is_c10d_call(function)


def helper_shares(stats: dict) -> dict[Function, dict[Function, float]]:
    """helper -> {priced library function: the share of the helper's own time spent on its behalf}, for the torch,
    standard-library and C functions not charged by the model, following callers up to the priced functions (a
    cycle of calls ends the walk)."""
    shares: dict[Function, dict[Function, float]] = {}
    walking: set[Function] = set()

    def of(function: Function) -> dict[Function, float]:
        if function in shares:
            return shares[function]
        if function in walking:
            return {}
        walking.add(function)
        callers = stats[function][4]
        total = sum(edge[3] for edge in callers.values())
        found: dict[Function, float] = defaultdict(float)
        for caller, edge in callers.items():
            weight = edge[3] / total if total else 1.0 / len(callers)
            if caller not in stats or charged_by_model(caller):
                continue
            if priced_library(caller, stats):
                found[caller] += weight
            elif library_of(caller) in UNPRICED and caller[2] != MODULE_CALL:
                for ancestor, share in of(caller).items():
                    found[ancestor] += weight * share
            # else a module's forward, or another site package's code: its own time is its caller's price
        walking.discard(function)
        shares[function] = dict(found)
        return shares[function]

    return {f: of(f) for f in stats
            if not priced_library(f, stats) and library_of(f) in UNPRICED and not charged_by_model(f)}


def run_prices(run: Profile, probe_unc_us: float, loop_unc_ns: float, slowdown: float, in_situ: float,
               inclusive: bool) -> dict[Function, tuple[float, float]]:
    """priced function -> (calls per step, ns per call at the constants' host) of one rank's profile."""
    own = own_ns_per_step(run, in_situ * overhead_scale(run, probe_unc_us, loop_unc_ns))
    ns = {f: own[f][1] for f in own if priced_library(f, run.stats)}
    if inclusive:
        for helper, shares in helper_shares(run.stats).items():
            for function, share in shares.items():
                ns[function] += own[helper][1] * share
    to_reference = probe_unc_us * slowdown / run.probe_us
    return {f: (own[f][0], ns[f] * to_reference / own[f][0]) for f in ns if own[f][0] > 0}


def fit(runs: list[Profile], specs: Path, in_situ: float, inclusive: bool = True,
        reference_runs: list[Profile] | None = None) -> dict:
    """`reference_runs` (default: `runs`) set the uncontended calibration loop, as the in-situ ratio's runs do."""
    probe_unc_us, slowdown = uncontended_probe_us(), mean_host_slowdown(specs)
    loop_unc_ns = uncontended_loop_ns(reference_runs or runs, probe_unc_us)
    per_function: dict[Function, list[float]] = defaultdict(list)
    calls_per_step: dict[Function, float] = defaultdict(float)
    for run in runs:
        for function, (calls, ns) in run_prices(run, probe_unc_us, loop_unc_ns, slowdown, in_situ, inclusive).items():
            key = portable(function)
            per_function[key].append(ns)
            calls_per_step[key] += calls
    functions = {k: round(statistics.median_low(v)) for k, v in per_function.items()}
    seen = defaultdict(int)
    for file, _, _ in functions:
        seen[library_key(file)] += 1
    functions = {k: ns for k, ns in functions.items() if seen[library_key(k[0])] >= MIN_FUNCTIONS}
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    by_library: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (file, line, name), ns in functions.items():
        calls = calls_per_step[(file, line, name)]
        named = (by_name[f"{file}:{name}"],) if name != MODULE_CALL else ()  # a forward is priced by its line alone
        for total in (*named, by_library[library_key(file)]):
            total[0] += ns * calls
            total[1] += calls
    return {"functions": {f"{file}:{line}:{name}": ns for (file, line, name), ns in sorted(functions.items())},
            "names": {k: round(ns / calls) for k, (ns, calls) in sorted(by_name.items()) if calls},
            "libraries": {k: round(ns / calls) for k, (ns, calls) in sorted(by_library.items()) if calls}}


def profile_folders(data: Path) -> list[Path]:
    """The folders of profiles the prices read: `data` and those of MORE_PROFILES it has."""
    return [data, *(data / sub for sub in MORE_PROFILES if (data / sub).is_dir())]


def versions(data: Path) -> dict[str, str]:
    """The measured libraries' versions, from versions.txt's line "torch X transformers Y deepspeed Z ..." ("-" for one
    the machine lacked)."""
    line = next(l for l in (data / "versions.txt").read_text().splitlines() if l.startswith("torch "))
    words = line.split()
    return {k.removesuffix("-core"): v for k, v in zip(words[::2], words[1::2]) if k != "torch" and v != "-"}


def simulate_profiled(data: Path, names: list[str]) -> None:
    """Each profiled program (all if `names` is empty) under Phantora with the shipped prices, as the framework
    benchmark runs its rows (`--host-contention h200-vm`), against its plain run's step time."""
    for config in selected(names):
        logs = [folder / f"{config['name']}.log" for folder in profile_folders(data)]
        log = next((path for path in logs if path.exists()), None)
        if log is None:  # a 4-GPU program's profiles are kept apart (world4/)
            continue
        measured_ms = step_ms(log)
        predicted_ms = simulate(simulated(config), "h200")["step_s"] * 1e3
        print(f"{config['name']:32s} measured {measured_ms:7.1f} ms  simulated {predicted_ms:7.1f} ms "
              f"({error_pct(predicted_ms, measured_ms):+.1f} %)", flush=True)


def simulate_at_probed_speed(data: Path, names: list[str]) -> None:
    """Each program profiled every other step (`<name>.alternate.*`) under Phantora at the host speed its probes
    measured, against the median of rank 0's unprofiled steps: a host-bound step compared at the speed it ran at,
    which a plain run, without probes, cannot give (benchmarks/e2e/frameworks/probed.py)."""
    for config in selected(names):
        records = [json.loads(p.read_text()) for folder in profile_folders(data)
                   for p in sorted(folder.glob(f"{config['name']}.alternate.rank*.json"))]
        if not records:
            continue
        # rank 0's steps, optimizer step to optimizer step, the probe left out, as the benchmark reads rank 0
        measured_ms = 1e3 * statistics.median(s for profiled, s in records[0]["step_host_s"] if not profiled)
        scale = host_scale([r["python_loop_probe_us"] for r in records])
        predicted_ms = simulate(simulated(config), "h200", at_host_scale(scale))["step_s"] * 1e3
        print(f"{config['name']:32s} host {scale:.2f}x uncontended  measured {measured_ms:7.1f} ms  simulated "
              f"{predicted_ms:7.1f} ms ({error_pct(predicted_ms, measured_ms):+.1f} %)", flush=True)


def selected(names: list[str]) -> list[dict]:
    return [c for c in json.loads(CONFIGS.read_text())["configs"] if not names or c["name"] in names]


def simulated(config: dict) -> dict:
    return {**config, "args": [*config["args"], config["steps_flag"], str(SIMULATED_STEPS)]}


def main() -> None:
    p = fit_parser(__doc__, DATA)
    p.add_argument("--own-only", action="store_true", help="price a function's own time alone (no helpers)")
    p.add_argument("--calibrated-only", action="store_true",
                   help="take off cProfile's calibrated cost alone, not its cost in situ")
    p.add_argument("--simulate", nargs="*", metavar="NAME", help="simulate the profiled programs instead of fitting")
    p.add_argument("--simulate-probed", nargs="*", metavar="NAME",
                   help="simulate the programs profiled every other step at their probed host speed")
    a = p.parse_args()
    if a.simulate is not None:
        simulate_profiled(a.data, a.simulate)
        return
    if a.simulate_probed is not None:
        simulate_at_probed_speed(a.data, a.simulate_probed)
        return
    own = [Profile.load(path) for path in sorted(a.data.glob("*.profiled.rank*.pstats"))]
    runs = own + [Profile.load(path) for folder in profile_folders(a.data)[1:]
                  for path in sorted(folder.glob("*.profiled.rank*.pstats"))]
    if unprobed := [r.name for r in runs if r.probe_us is None]:
        p.error(f"profiles without host-speed probes (taken before the probes were): {', '.join(unprobed)}")
    in_situ = 1.0 if a.calibrated_only else in_situ_ratio(a.data)
    prices = fit(runs, a.specs, in_situ, inclusive=not a.own_only, reference_runs=own)
    prices["versions"] = {k: v for folder in profile_folders(a.data) for k, v in versions(folder).items()}
    print(f"cProfile's cost per call: {in_situ:.2f}x its calibration; "
          f"{len(prices['functions'])} functions of {len(runs)} profiles; per library, ns per call: "
          + ", ".join(f"{k} {v}" for k, v in prices["libraries"].items()))
    if a.dry_run:
        return
    source = f"benchmarks/host/fit_python_prices.py on {relative(a.data)}"
    path = update_fitted("h200", "python_prices", prices, dict.fromkeys(prices, source), specs_root=a.specs)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
