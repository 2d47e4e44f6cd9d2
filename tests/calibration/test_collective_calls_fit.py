"""The fit of `collective_ns` (benchmarks/host/fit_collective_calls.py): a c10d call's host time in situ from
cProfile statistics, with cProfile's own cost for every profiled call under it taken off."""

import pytest

from benchmarks.host import fit_collective_calls as fit
from benchmarks.host.summarize_python_profiles import Overhead, Profile

SITE = "/v/lib/python3.12/site-packages/"
HOOK = (SITE + "deepspeed/runtime/zero/stage3.py", 10, "hook")
WRAPPER = (SITE + "torch/distributed/c10d_logger.py", 80, "wrapper")
ALL_GATHER = (SITE + "torch/distributed/distributed_c10d.py", 3900, "all_gather_into_tensor")
CHECK = (SITE + "torch/distributed/distributed_c10d.py", 900, "_check_single_tensor")
PG_CALL = ("~", 0, "<method '_allgather_base' of 'torch._C._distributed_c10d.ProcessGroup' objects>")
GET_RANK = (SITE + "torch/distributed/distributed_c10d.py", 2300, "get_rank")

# 4 calls over 2 steps: the wrapper 1 µs of its own a call; the API call 50 µs in all, of which 10 C and 4 a check
STATS = {
    HOOK: (4, 4, 0.0, 0.0, {}),
    WRAPPER: (4, 4, 4e-6, 204e-6, {HOOK: (4, 4, 4e-6, 204e-6)}),
    ALL_GATHER: (4, 4, 144e-6, 200e-6, {WRAPPER: (4, 4, 144e-6, 200e-6)}),
    CHECK: (8, 8, 16e-6, 16e-6, {ALL_GATHER: (8, 8, 16e-6, 16e-6)}),
    PG_CALL: (4, 4, 40e-6, 40e-6, {ALL_GATHER: (4, 4, 40e-6, 40e-6)}),
    GET_RANK: (4, 4, 4e-6, 4e-6, {HOOK: (4, 4, 4e-6, 4e-6)}),
}


def profile(callee_ns: float) -> Profile:
    return Profile("p", STATS, 2, Overhead(callee_ns=callee_ns, caller_ns=0.0), calibration_loop_ns=25.0,
                   probe_us=5000.0)


def test_profiled_calls_under_a_call_follow_the_callee_edges():
    under = fit.calls_under(STATS)
    assert under[ALL_GATHER] == 3  # two checks and the process group's C call, per call
    assert under[WRAPPER] == 4 and under[HOOK] == 6


def test_a_calls_cost_is_its_cumulative_time_and_its_wrappers_less_cprofiles_cost_in_situ():
    calls, ns = fit.call_costs(profile(callee_ns=0.0), in_situ=3.0)
    assert calls == 2 and ns == pytest.approx(51_000)  # 50 µs under the API, 1 µs the wrapper's own
    # five profiled calls a call (the wrapper, the API, two checks, the C call) at 3 x 200 ns in situ
    assert fit.call_costs(profile(callee_ns=200.0), in_situ=3.0)[1] == pytest.approx(51_000 - 5 * 600)
