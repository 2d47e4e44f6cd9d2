"""Multi-rank programs, unmodified, end to end under `phantora torchrun`."""

import json

import pytest

from conftest import SCRIPTS, rank_json

from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value

PROBE = str(SCRIPTS / "dist_probe.py")
TRAIN = str(SCRIPTS / "parallel_train.py")


def test_collectives_objects_and_groups(torchrun):
    run = torchrun(2, PROBE)
    assert run.code == 0, run.stderr
    seen = rank_json(run, "PROBE")
    assert set(seen) == {0, 1}
    for rank, s in seen.items():
        assert s["backend"] == "nccl" and s["nccl"] and s["world"] == 2
        assert s["objects"] == [{"rank": 0}, {"rank": 1}]          # real objects, exchanged
        assert s["broadcast_object"] == {"from": 0}
        assert s["broadcast_indices"] == [3, 1, 2]                 # small host data keeps its values
        # 1000 tokens over 8 experts at random, each rank its own draw (Note [Random routing]);
        # rank r receives its 4 experts' counts from both ranks, known without the other's data
        counts, received = s["moe_counts"][:8], s["moe_counts"][8:]
        assert sum(counts) == 1000 and len(set(counts)) > 1
        assert received == seen[0]["moe_counts"][4 * rank:4 * rank + 4] + seen[1]["moe_counts"][4 * rank:4 * rank + 4]
        assert s["funcol_view_bytes"] == 0 and s["funcol_result"] == "AsyncCollectiveTensor"
        assert s["funcol_shape"] == [2048]
        # a 4 MiB all-reduce over NVLink takes tens of microseconds, not nothing and not milliseconds
        assert 0.01 < s["all_reduce_4MiB_ms"] < 1.0
        # a functional all-to-all pays its split sizes' extra over an all-reduce, and an op on a collective's
        # result its own dispatch, plus a wrapper per piece of a split (a cat only waits), at this rank's host speed
        c, lo, hi = H200_HOST, 0.75, 1.25  # dedicated hosts run the constants (the mean VM host's) / 1.249
        assert lo * c.all_to_all_extra_ns < 1e3 * (s["all_to_all_us"] - s["all_reduce_us"]) < hi * c.all_to_all_extra_ns
        wrap = 1e3 * (s["split_result_us"] - s["split_plain_us"])
        wait = 1e3 * (s["cat_result_us"] - s["cat_plain_us"])
        assert lo * c.async_collective_op_ns < wait < hi * c.async_collective_op_ns
        assert wrap - wait == pytest.approx(4 * c.async_collective_per_output_ns * wait / c.async_collective_op_ns, rel=0.02)
        view = 1e3 * (s["view_result_us"] - s["view_plain_us"])  # aten.view: the wrapper only
        assert view == pytest.approx(c.async_collective_per_output_ns * wait / c.async_collective_op_ns, rel=0.05)
    assert seen[1]["object_p2p"] == {"to": 1}
    assert seen[0]["moe_counts"][:8] != seen[1]["moe_counts"][:8]
    # the barrier lines the ranks up; the synchronize after it costs each rank's host its own speed (1-2 µs apart)
    assert abs(seen[0]["end_ms"] - seen[1]["end_ms"]) < 0.005
    summary = run.summary
    assert summary["world_size"] == 2 and summary["complete"]
    trace = json.loads((run.out_dir / "trace.json").read_text())
    pids = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert len(pids) == 2


def test_simulated_times_do_not_depend_on_os_scheduling(torchrun):
    """Random real-time delays before every message to the coordinator change nothing simulated."""
    runs = [torchrun(2, PROBE, env={"PHANTORA_DEBUG_RANDOM_DELAY_MS": "3"}) for _ in range(2)]
    for run in runs:
        assert run.code == 0, run.stderr
    first, second = (rank_json(r, "PROBE") for r in runs)
    assert first == second
    assert runs[0].summary["simulated_time_s"] == runs[1].summary["simulated_time_s"]


@pytest.mark.parametrize("mode, nproc, extra", [
    ("ddp", 2, ["--accum", "2"]),
    pytest.param("fsdp", 2, [], marks=pytest.mark.every_build),
    ("pp", 2, []),
    ("pp", 4, []),  # Note [Objects after a sync]: four stages hung in the pipeline's start-up vote
    ("fsdp_tp", 4, []),
])
def test_parallelism_runs_unmodified(torchrun, mode, nproc, extra):
    run = torchrun(nproc, "--host-contention", "none", TRAIN, "--mode", mode, *extra)  # identical hosts
    assert run.code == 0, run.stderr
    results = rank_json(run, "RESULT")
    assert set(results) == set(range(nproc))
    for r in results.values():
        assert all(t > 0 for t in r["step_ms"]) and r["peak_gib"] > 0
    assert run.summary["world_size"] == nproc and run.summary["nccl_calls"] > 0
    if mode != "pp":  # data and tensor parallel ranks run in lockstep
        assert len({tuple(r["step_ms"]) for r in results.values()}) == 1
    if mode == "fsdp_tp":  # DTensor dispatches ops itself, from Python and from the autograd engine
        counts = json.loads((run.out_dir / "rank0" / "result.json").read_text())
        assert 0 < counts["subclass_backward_ops"] < counts["subclass_ops"]


def test_contended_hosts_make_a_job_wait_for_its_slowest_rank(torchrun):
    """With contended hosts (the measured VMs') the ranks' hosts differ in speed around the mean host, and a tensor-
    parallel step (host-bound here) waits for the slowest at every collective: slower than the same job
    on identical hosts at the mean host's speed (models/host_contention.py Note [Contended hosts])."""
    mean_factor = load_profile("h200").host_contention.value.mean_factor()
    mean = ("--host-contention", "none", "--host-time-scale", f"{mean_factor:.9f}")
    contended = ("--host-contention", "h200-vm")
    runs = {"contended": torchrun(4, *contended, TRAIN, "--mode", "fsdp_tp"),
            "uniform": torchrun(4, *mean, TRAIN, "--mode", "fsdp_tp")}
    steps = {}
    for name, run in runs.items():
        assert run.code == 0, run.stderr
        steps[name] = sorted(r["step_ms"][-1] for r in rank_json(run, "RESULT").values())
    assert steps["uniform"][0] == steps["uniform"][-1]  # identical hosts: lockstep
    assert min(steps["contended"]) > steps["uniform"][0]
    assert runs["contended"].summary["host_time"]["contention"] == "h200-vm"


def test_ddp_overlaps_gradient_all_reduce_with_backward(torchrun):
    """DDP's bucketed all-reduces run while backward still computes: less NCCL time is exposed than spent."""
    run = torchrun(2, TRAIN, "--mode", "ddp", "--layers", "8")
    assert run.code == 0, run.stderr
    summary = run.summary
    assert summary["nccl_s"] > 0
    assert summary["exposed_comm_s"] < 0.8 * summary["nccl_s"]


def test_framework_idioms(torchrun):
    """What DeepSpeed, Lightning, Accelerate and FSDP do around their steps works as on a GPU (issue: real
    frameworks, unmodified)."""
    run = torchrun(2, str(SCRIPTS / "framework_idioms_probe.py"))
    assert run.code == 0, run.stderr[-3000:] + run.stdout[-3000:]
    assert "NCCL support is not compiled" not in run.stdout + run.stderr
    seen = rank_json(run, "PROBE")
    for rank, s in seen.items():
        assert s["backend"] == "nccl"
        assert s["nvtx_depths"] == [0, 1, 1, 0]
        assert s["weakref_param_kept"]
        assert s["set_data"] == [f"cuda:{rank}", True, True] and s["set_data_grad"] == f"cuda:{rank}"
        assert s["broadcast"] == 7 and s["all_reduce_sum"] == 3.0 and s["all_reduce_max"] == 1
        assert s["all_gather"] == [0, 0, 1, 10] and s["derived"] == 6.0
        assert s["pinned"] and s["tokens"] == [[2_000_000], f"cuda:{rank}"]
        a, b, a10, storage = s["addresses"]
        assert a != b and a > 0 and b > 0 and a10 == a + 40 and storage == a
        assert s["no_dispatch_record_stream"]
        assert s["moved_back"] == ["cpu", "FakeTensor", False]


def test_a_value_is_read_after_the_stores_host_has_ended(torchrun):
    """Note [The store outlives every rank's reads]: rank 0 hosts the c10d store and ends first; rank 1 still
    reads its all-reduced value from it."""
    run = torchrun(2, str(SCRIPTS / "late_reader_probe.py"))
    assert run.code == 0, run.stderr[-3000:]
    assert "[rank1]:LATE 3.0" in run.stdout


def test_moe_routing_is_consistent_across_ranks_for_every_framework_style(torchrun):
    """runtime/routing.py Note [Simulated routing]: a router's topk of unknown scores is drawn, and what each
    rank derives from the draw is real, so what each rank sends is what the others expect to receive; a
    recomputed (checkpointed) router draws what its forward drew."""
    run = torchrun(2, str(SCRIPTS / "moe_routing_probe.py"))
    assert run.code == 0, run.stderr[-3000:]
    seen = rank_json(run, "PROBE")
    tokens_times_k = 256 * 2
    for rank in (0, 1):
        calls = seen[rank]["splits"]
        assert len(calls) == 3 and calls[1] == calls[2]  # the checkpointed forward and its recomputation
        for call, (send, recv) in enumerate(calls):
            assert sum(send) == tokens_times_k
            other = seen[1 - rank]["splits"][call]
            assert recv[1 - rank] == other[0][rank] and recv[rank] == send[rank]
        assert calls[0] != calls[1]  # each forward routes anew
        megatron, hf = seen[rank]["megatron"], seen[rank]["hf"]
        assert megatron["gathered"] == [seen[0]["megatron"]["counts"], seen[1]["megatron"]["counts"]]
        assert megatron["picked"] == megatron["picked_probs"] == tokens_times_k == sum(megatron["counts"])
        half = len(megatron["counts"]) // 2  # experts 4r..4r+3 live on rank r
        assert megatron["received"] == sum(sum(seen[s]["megatron"]["counts"][half * rank:half * (rank + 1)])
                                           for s in (0, 1))
        assert hf["rows"] == megatron["counts"] and hf["hit"] == 8
        assert len(set(megatron["counts"])) > 1  # a balanced router's fluctuations, not equal counts
    assert seen[0]["megatron"]["counts"] != seen[1]["megatron"]["counts"]  # each rank routes its own tokens
