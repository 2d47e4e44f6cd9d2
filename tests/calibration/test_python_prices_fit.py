"""The library Python prices' fit (benchmarks/host/fit_python_prices.py): which code is priced, and how the Python
a priced function runs through torch's and the standard library's helpers joins its price."""

from benchmarks.host import fit_python_prices as fit

SITE = "/v/lib/python3.12/site-packages/"
HOOK = (SITE + "deepspeed/runtime/zero/stage3.py", 10, "hook")
FORWARD = (SITE + "transformers/models/llama/modeling_llama.py", 62, "forward")
HELPER = (SITE + "torch/cuda/__init__.py", 1178, "current_stream")
CHARGED = (SITE + "torch/nn/modules/module.py", 1783, "_call_impl")
FUNCTION_FORWARD = (SITE + "megatron/core/tensor_parallel/layers.py", 446, "forward")  # an autograd Function's
APPLY = ("~", 0, "<built-in method apply>")
CUSTOM_FWD = (SITE + "torch/amp/autocast_mode.py", 476, "decorate_fwd")
ISINSTANCE = ("~", 0, "<built-in method builtins.isinstance>")
OP = ("~", 0, "<method 'add' of 'torch._C.TensorBase' objects>")


def edge(ct: float) -> tuple:
    return (1, 1, ct, ct)


STATS = {
    HOOK: (1, 1, 1.0, 5.0, {}),
    FORWARD: (1, 1, 1.0, 2.0, {CHARGED: edge(2.0)}),
    CHARGED: (1, 1, 1.0, 3.0, {}),
    # the helper: 3 s of its time for the hook, 1 for a module's forward, 1 for torch's module call
    HELPER: (5, 5, 0.5, 5.0, {HOOK: edge(3.0), FORWARD: edge(1.0), CHARGED: edge(1.0)}),
    ISINSTANCE: (5, 5, 0.1, 0.1, {HELPER: edge(0.1)}),
    OP: (1, 1, 0.2, 0.2, {HOOK: edge(0.2)}),
    FUNCTION_FORWARD: (2, 2, 1.0, 2.0, {APPLY: edge(1.0), CUSTOM_FWD: edge(1.0)}),
}


def test_library_functions_are_priced_but_torch_and_module_forwards_are_not():
    assert fit.priced_library(HOOK, STATS)
    assert not fit.priced_library(FORWARD, STATS)  # module_call_ns prices a module's forward
    assert fit.priced_library(FUNCTION_FORWARD, STATS)  # an autograd Function's, called by its apply, is no module call
    assert not fit.priced_library(HELPER, STATS) and not fit.priced_library(ISINSTANCE, STATS)


CHECKPOINT_MODE = (SITE + "torch/utils/checkpoint.py", 1335, "__torch_dispatch__")
PYTREE = (SITE + "torch/utils/_pytree.py", 1278, "unflatten")
MODE_STATS = {
    CHECKPOINT_MODE: (2, 2, 1.0, 2.0, {}),
    PYTREE: (2, 2, 1.0, 1.0, {CHECKPOINT_MODE: edge(1.0)}),
}


def test_activation_checkpointings_python_is_priced_as_a_library_of_its_own():
    assert fit.priced_library(CHECKPOINT_MODE, MODE_STATS)  # no other term charges it
    assert fit.library_key(fit.portable(CHECKPOINT_MODE)[0]) == "torch/utils/checkpoint.py"
    assert not fit.priced_library(PYTREE, MODE_STATS)
    assert fit.helper_shares(MODE_STATS)[PYTREE] == {CHECKPOINT_MODE: 1.0}  # the mode's helpers join its price


def test_helpers_join_the_price_of_the_priced_functions_that_run_them():
    shares = fit.helper_shares(STATS)
    assert shares[HELPER] == {HOOK: 0.6}  # the forward's and torch's module call's share belong to no price
    assert shares[ISINSTANCE] == {HOOK: 0.6}  # a C helper the helper calls, in turn
    assert OP not in shares and CHARGED not in shares  # ops and torch's module calls are the model's


C10D = SITE + "torch/distributed/distributed_c10d.py"
WRAPPER = (SITE + "torch/distributed/c10d_logger.py", 80, "wrapper")
ALL_REDUCE = (C10D, 2800, "all_reduce")
CHECK = (C10D, 900, "_check_single_tensor")
GET_RANK = (C10D, 2300, "get_rank")
PG_ALLREDUCE = ("~", 0, "<method 'allreduce' of 'torch._C._distributed_c10d.ProcessGroup' objects>")

C10D_STATS = {
    HOOK: (1, 1, 1.0, 9.0, {}),
    WRAPPER: (2, 2, 0.5, 6.0, {HOOK: (2, 2, 0.5, 6.0)}),
    ALL_REDUCE: (2, 2, 1.0, 5.5, {WRAPPER: (2, 2, 1.0, 5.5)}),
    CHECK: (2, 2, 0.5, 0.5, {ALL_REDUCE: (2, 2, 0.5, 0.5)}),
    PG_ALLREDUCE: (2, 2, 4.0, 4.0, {ALL_REDUCE: (2, 2, 4.0, 4.0)}),
    GET_RANK: (1, 1, 0.25, 0.25, {HOOK: (1, 1, 0.25, 0.25)}),
}


def test_a_c10d_calls_python_is_collective_ns_and_not_its_callers_price():
    shares = fit.helper_shares(C10D_STATS)
    for c10d_call in (WRAPPER, ALL_REDUCE, CHECK):
        assert not shares.get(c10d_call)  # collective_ns charges the whole call
    assert shares[GET_RANK] == {HOOK: 1.0}  # c10d's other Python stays in its caller's price


def test_cprofiles_cost_in_situ_comes_off_the_prices():
    from benchmarks.host.summarize_python_profiles import Overhead, Profile

    profile = Profile("p", {HOOK: (1000, 1000, 0.010, 0.010, {})}, 1, Overhead(callee_ns=100.0, caller_ns=0.0),
                      calibration_loop_ns=25.0, probe_us=5000.0)
    prices = [fit.run_prices(profile, 5000.0, 25.0, 1.0, in_situ, inclusive=False)[HOOK][1] for in_situ in (1.0, 3.0)]
    assert prices == [9900.0, 9700.0]  # 10 µs a call, less 100 ns calibrated, or three times that in situ


def test_a_framework_the_measuring_machine_lacked_has_no_version(tmp_path):
    line = "torch 2.11.0 transformers 5.24.0 deepspeed 0.19.8 megatron-core -"
    (tmp_path / "versions.txt").write_text(f"a warning\n{line}\n")
    assert fit.versions(tmp_path) == {"transformers": "5.24.0", "deepspeed": "0.19.8"}
