"""Reports from the coordinator's state: hand-derived breakdowns, partial results, a valid Perfetto trace."""

from __future__ import annotations

import io
import json

import pytest

from phantora.engine.coordinator import Coordinator
from phantora.models.interference import GpuSharing
from phantora.models.network import Completion, NetworkSimulator, Topology
from phantora.protocol.records import (
    CollectiveRecord,
    HostSleepRecord,
    KernelRecord,
    RankFinished,
    SyncRequest,
    encode_stream,
)
from phantora.models.power import PowerCap
from phantora.reports.breakdown import intersection, merge, rank_breakdown
from phantora.reports.summary import ProcessUsage, build_summary, print_summary, write_reports
from phantora.specs import get_gpu_spec
from phantora.specs.cluster import cluster_from_flags
from phantora.reports.trace import write_chrome_trace

CLUSTER = cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=2)


class FixedNetwork:
    """Every operation takes exactly `size_bytes` ns on the network (so times can be derived by hand)."""

    def __init__(self) -> None:
        self.now_ns = 0
        self._flight: dict = {}

    def submit(self, req) -> None:
        self._flight[req.key] = Completion(req.key, req.op, req.start_ns, req.start_ns + req.size_bytes, "ring", "LL")

    def next_event_ns(self):
        return min((c.end_ns for c in self._flight.values()), default=None)

    def advance_to(self, safe_ns: int) -> list[Completion]:
        done = sorted((c for c in self._flight.values() if c.end_ns <= safe_ns), key=lambda c: (c.end_ns, c.key))
        for c in done:
            del self._flight[c.key]
        self.now_ns = safe_ns
        return done


def two_ranks() -> Coordinator:
    """Rank 0: kernel [0, 100) on stream 0; all_reduce on stream 1 reached at 50, network [80, 180).
    Rank 1: kernel [0, 80) on stream 0, then the all_reduce reached at 80. Both sync the device."""
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [KernelRecord(0, 0, 100, "gemm0", 1e9, 0.0, "gemm", "bf16[8, 8]"),
                 CollectiveRecord(1, 50, (0, 1), 0, "all_reduce", 100, None, "w"),
                 SyncRequest(1, 60, "device")])
    c.submit(1, [KernelRecord(0, 0, 80, "gemm1", 2e9, 0.0, "gemm"),
                 CollectiveRecord(0, 10, (0, 1), 0, "all_reduce", 100, None, "w"),
                 SyncRequest(1, 20, "device")])
    c.submit(0, [RankFinished(200)])
    c.submit(1, [RankFinished(190)])
    assert c.done
    return c


def test_interval_algebra():
    assert merge([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9)]) == [(0, 4), (5, 7)]
    assert merge([(0, 2), (4, 6)], gap_ns=2) == [(0, 6)]
    assert intersection([(0, 4), (6, 10)], [(2, 8)]) == [(2, 4), (6, 8)]


def test_breakdown_by_hand():
    c = two_ranks()
    b0, b1 = rank_breakdown(c, 0), rank_breakdown(c, 1)
    # rank 0: compute [0,100), NCCL [50,180) of which [100,180) exposed, spun [50,80)
    assert (b0.compute_ns, b0.nccl_ns, b0.exposed_comm_ns, b0.nccl_wait_ns, b0.busy_ns) == (100, 130, 80, 30, 180)
    assert (b0.end_ns, b0.host_blocked_ns, b0.kernels, b0.nccl_calls) == (200, 120, 1, 1)  # blocked 60 -> 180
    # rank 1: compute [0,80), NCCL [80,180), no overlap, no spin
    assert (b1.compute_ns, b1.nccl_ns, b1.exposed_comm_ns, b1.nccl_wait_ns) == (80, 100, 100, 0)
    assert b1.kernel_ns_by_class == {"gemm": 80, "nccl": 100}
    assert rank_breakdown(c, 1, host_end_ns=500).end_ns == 500  # the rank's own clock at exit counts


def summarise(c, tmp_path, **overrides):
    kwargs = dict(coordinator=c, gpu=get_gpu_spec("h200"), cluster=CLUSTER, world_size=c.world_size,
                  out_dir=tmp_path, exit_code=1, complete=False, wall_s=1.5,
                  processes=[ProcessUsage(0, 300 << 20, 0.5), ProcessUsage(1, 200 << 20, 0.25)],
                  launcher_peak_rss_bytes=100 << 20, error="rank 1 exited with code 3")
    kwargs.update(overrides)
    return build_summary(**kwargs)


def test_a_result_the_launcher_wrote_for_a_killed_rank_is_not_a_reported_rank(tmp_path):
    """The launcher writes a killed rank's last known peaks as its result file (cli/launch.py `_write_known_peaks`):
    its memory shows, but the rank did not report."""
    for rank, extra in ((0, {}), (1, {"written_by": "the launcher"})):
        (tmp_path / f"rank{rank}").mkdir()
        (tmp_path / f"rank{rank}" / "result.json").write_text(json.dumps(
            {"rank": rank, "devices": [{"peak_allocated_bytes": 1 << 30, "peak_reserved_bytes": 2 << 30}], **extra}))
    s = summarise(two_ranks(), tmp_path)
    assert s["ranks_reported"] == 1 and s["peak_reserved_gib"] == 2.0


def test_summary_with_partial_results(tmp_path):
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "result.json").write_text(json.dumps({
        "rank": 0, "exit_code": 0, "host_ns": 210,
        "devices": [{"peak_allocated_bytes": 3 << 30, "peak_reserved_bytes": 4 << 30, "num_ooms": 1}],
        "host_only_ops": 7, "generic_ops": {"aten::foo": 2}, "placeholders": {".item()": 3},
        "warnings": ["torch.compile runs eagerly"], "simulator_peak_rss_bytes": 400 << 20}))
    (tmp_path / "rank1").mkdir()
    (tmp_path / "rank1" / "result.json").write_text("{truncated")
    s = summarise(two_ranks(), tmp_path)
    assert s["simulated_time_s"] == 210e-9 and s["ranks_reported"] == 1 and not s["complete"]
    assert s["per_rank"][0]["reported"] and not s["per_rank"][1]["reported"]
    assert s["peak_allocated_gib"] == 3.0 and s["ooms"] == 1 and s["host_only_ops"] == 7
    assert s["flops"] == 3e9 and s["kernels"] == 2 and s["nccl_calls"] == 2
    assert s["nccl_s"] == 115e-9 and s["exposed_comm_s"] == 90e-9  # means over the two ranks
    assert s["simulator_peak_rss_gib"] == 400 / 1024 and s["simulator_cpu_s"] == 0.75
    assert "torch.compile runs eagerly" in s["warnings"]
    assert any("rank 1's result.json is unreadable" in w for w in s["warnings"])
    text = io.StringIO()
    print_summary(s, file=text)
    out = text.getvalue()
    assert "1 of 2 ranks wrote result.json" in out and "aten::foo x2" in out and "rank 1 exited with code 3" in out
    assert "exposed ms" in out  # the per-rank block
    write_reports(s, two_ranks(), tmp_path, trace=True)
    for name in ("summary.json", "trace.json", "report.png", "timeline.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_summary_says_how_much_gpu_time_rests_on_measured_kernels(tmp_path):
    """Issue 27's uncertainty shown to the user: the share of kernel time from the database, the analytic model and
    the generic guess, over every rank that reported."""
    for rank, by_source in ((0, {"measured": 600, "analytic": 200}), (1, {"measured": 100, "generic": 100})):
        (tmp_path / f"rank{rank}").mkdir()
        (tmp_path / f"rank{rank}" / "result.json").write_text(json.dumps({
            "rank": rank, "exit_code": 0, "host_ns": 200, "kernel_ns_by_source": by_source}))
    s = summarise(two_ranks(), tmp_path)
    assert s["kernel_time_share_by_source"] == {"measured": 0.7, "analytic": 0.2, "generic": 0.1}
    text = io.StringIO()
    print_summary(s, file=text)
    assert ("kernel sources    measured kernels 70.0 %, analytic model 20.0 %, generic guess 10.0 % of GPU time"
            in text.getvalue())


def test_summary_of_a_run_that_never_started(tmp_path):
    network = NetworkSimulator(Topology(CLUSTER))
    s = summarise(Coordinator(2, network), tmp_path, processes=[])
    assert s["simulated_time_s"] == 0 and s["ranks_reported"] == 0 and s["mfu_vs_bf16_peak"] is None
    write_reports(s, Coordinator(2, network), tmp_path, trace=False)
    assert (tmp_path / "summary.json").exists() and not (tmp_path / "trace.json").exists()
    print_summary(s, file=io.StringIO())


def test_trace_is_chrome_json_with_a_process_per_rank(tmp_path):
    c = Coordinator(1, FixedNetwork())
    side = encode_stream(0, 3)
    c.submit(0, [KernelRecord(0, 0, 1500, "gemm", 2e9, 1e6, "gemm", "bf16[64, 64]"),
                 KernelRecord(side, 5, 1, "tiny", kernel_class="elementwise"),
                 CollectiveRecord(0, 10, (0,), 0, "all_reduce", 250, None, "w"), SyncRequest(1, 20, "device")])
    c.submit(0, [RankFinished(2000)])
    path = tmp_path / "trace.json"
    write_chrome_trace(path, c)
    events = json.loads(path.read_text())["traceEvents"]
    assert all(isinstance(e["pid"], int) and e["ph"] in ("X", "M") for e in events)
    names = {(e["tid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert names == {(0, "host"), (1, "cuda:0 stream 0"), (2, "cuda:0 stream 3")}
    slices = {e["name"]: e for e in events if e["ph"] == "X"}
    assert slices["gemm"]["ts"] == 0 and slices["gemm"]["dur"] == 1.5 and slices["gemm"]["cat"] == "gemm"
    assert slices["gemm"]["args"]["shapes"] == "bf16[64, 64]" and slices["gemm"]["args"]["flops"] == 2e9
    assert slices["tiny"]["tid"] == 2 and slices["tiny"]["dur"] == 0.001  # nanoseconds survive
    nccl = slices["all_reduce"]
    assert (nccl["cat"], nccl["ts"], nccl["dur"]) == ("nccl", 1.5, 0.25)
    assert nccl["args"]["algorithm"] == "ring" and nccl["args"]["group"] == [0] and nccl["args"]["launch_us"] == 0.01
    assert slices["cudaDeviceSynchronize"]["tid"] == 0 and slices["cudaDeviceSynchronize"]["dur"] == 1.73


def test_summary_names_the_host_time_mode(tmp_path):
    network = NetworkSimulator(Topology(CLUSTER))
    s = summarise(Coordinator(2, network), tmp_path, processes=[])
    assert s["host_time"] == {"mode": "model", "deterministic": True, "scale": 1.0, "contention": "none"}
    contended = summarise(Coordinator(2, network), tmp_path, processes=[], host_contention="h200-vm")
    text = io.StringIO()
    print_summary(contended, file=text)
    assert "host model (deterministic), hosts contended as the H200 VMs'" in text.getvalue() and "constants x" not in text.getvalue()
    scaled = summarise(Coordinator(2, network), tmp_path, processes=[], host_time_scale=0.7)
    text = io.StringIO()
    print_summary(scaled, file=text)
    assert "host model (deterministic), constants x0.7, dedicated hosts" in text.getvalue()
    for rank, ns in ((0, 3_000_000), (1, 1_000_000)):
        (tmp_path / f"rank{rank}").mkdir()
        (tmp_path / f"rank{rank}" / "result.json").write_text(json.dumps(
            {"rank": rank, "host_ns": 5, "host_time": "measured", "host_time_measured_ns": ns}))
    s = summarise(Coordinator(2, network), tmp_path, processes=[], host_time="measured", host_time_scale=0.5)
    assert s["host_time"] == {"mode": "measured", "deterministic": False, "scale": 0.5, "measured_s": 0.002,
                              "contention": "none"}
    text = io.StringIO()
    print_summary(s, file=text)
    assert "measured CPU time x0.5: 2.00 ms charged per rank (varies between runs)" in text.getvalue()


def test_summary_says_how_much_the_power_cap_slowed_the_gpus(tmp_path):
    """300 GEMMs of 1 ms demanding 600 W against 300 W left under the cap: the summary gives the time the
    cap added to them (Note [Power cap]); without a cap it says nothing."""
    cap = PowerCap(cap_w=500.0, idle_w=200.0, pj_per_tensor_flop=1.0, pj_per_byte=0.0, window_s=0.05)
    one_gpu = cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=1)
    sharing = GpuSharing(compute_slowdown=1.5, nccl_slowdown=2.0)
    network = NetworkSimulator(Topology(one_gpu), sharing=sharing)
    c = Coordinator(1, network, sharing=sharing, power=cap)
    c.submit(0, [KernelRecord(0, 0, 1_000_000, f"g{i}", flops=0.6e12, kernel_class="gemm") for i in range(300)]
             + [SyncRequest(1, 0, "device")])
    c.submit(0, [RankFinished(10**9)])
    s = summarise(c, tmp_path, cluster=one_gpu, processes=[])
    power = s["power_cap"]
    assert power["cap_w"] == 500.0 and power["clocked_s"] == 0.3
    assert 0.6 < power["slowdown"] < 1.0  # the steady state doubles them, after a ramp of a few 0.05 s windows
    assert power["slowed_s"] == sum(sp.end_ns - sp.start_ns for sp in c.spans(0)) / 1e9 - 0.3
    text = io.StringIO()
    print_summary(s, file=text)
    assert f"power cap         500 W: GEMM and attention {100 * power['slowdown']:.1f} % slower" in text.getvalue()
    assert summarise(two_ranks(), tmp_path)["power_cap"] is None


def test_summary_says_how_much_slower_the_slowest_chip_ran_the_gemms(tmp_path):
    """Note [The slowest chip's pace]: a job's clock factor is in summary.json and on the console; at the mean
    chip's pace (one GPU, --no-chip-variation) the summary says nothing."""
    c = Coordinator(2, FixedNetwork(), clock_factor=1.02)
    for rank in (0, 1):
        c.submit(rank, [KernelRecord(0, 0, 1000, f"g{rank}", kernel_class="gemm"), SyncRequest(1, 0, "device")])
        c.submit(rank, [RankFinished(2000)])
    s = summarise(c, tmp_path)
    assert s["chip_pace"] == {"gpus": 2, "clocked_slowdown": pytest.approx(0.02)}
    assert s["kernel_time_s_by_class"]["gemm"] == 2 * 1020 / 1e9
    text = io.StringIO()
    print_summary(s, file=text)
    assert "chip pace         GEMM and attention at the expected slowest of 2 chips: 2.0 % slower" in text.getvalue()
    assert summarise(two_ranks(), tmp_path)["chip_pace"] is None


def test_the_programs_own_sleep_is_not_gpu_idle_time(tmp_path):
    """Breakdown Note [The program's own sleep]: rank 0 sleeps 2000 ns after its work (as TorchTitan's rank 0
    does before it exits) while rank 1 has ended; the run slept then, and busy, TFLOP/s and MFU are over the
    200 ns before."""
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [KernelRecord(0, 0, 100, "gemm0", 1e9, 0.0, "gemm"),
                 CollectiveRecord(1, 50, (0, 1), 0, "all_reduce", 100, None, "w"), SyncRequest(1, 60, "device")])
    c.submit(1, [KernelRecord(0, 0, 80, "gemm1", 2e9, 0.0, "gemm"),
                 CollectiveRecord(0, 10, (0, 1), 0, "all_reduce", 100, None, "w"), SyncRequest(1, 20, "device")])
    c.submit(0, [HostSleepRecord(200, 1200), HostSleepRecord(1200, 2200), RankFinished(2200)])
    c.submit(1, [RankFinished(190)])
    assert c.done and c.host_sleeps(0) == [(200, 2200)] and c.host_sleeps(1) == []
    b0 = rank_breakdown(c, 0)
    assert (b0.end_ns, b0.sleep_ns, b0.host_blocked_ns) == (2200, 2000, 120)  # a sleep is not a blocked host
    s = summarise(c, tmp_path)
    assert s["simulated_time_s"] == 2200e-9 and s["asleep_s"] == 2000e-9
    assert [r["busy_fraction"] for r in s["per_rank"]] == [180 / 200, 180 / 200]
    assert s["per_rank"][0]["sleep_s"] == 2000e-9
    assert s["achieved_tflops"] == 3e9 / 2 / 200e-9 / 1e12
    text = io.StringIO()
    print_summary(s, file=text)
    assert "program sleep" in text.getvalue() and "0.0000 s of it every rank slept" in text.getvalue()
    events = json.loads(_trace_text(c, tmp_path))["traceEvents"]
    assert [(e["ts"], e["dur"]) for e in events if e.get("cat") == "host_sleep"] == [(0.2, 2.0)]


def test_a_sleep_while_other_ranks_work_is_not_the_runs_sleep(tmp_path):
    """Only time when every rank sleeps or has ended, and no GPU works, is taken out."""
    c = Coordinator(2, FixedNetwork())
    c.submit(0, [HostSleepRecord(0, 500), KernelRecord(0, 500, 100, "k0", 0.0, 0.0, "gemm"), RankFinished(600)])
    c.submit(1, [KernelRecord(0, 0, 300, "k1", 0.0, 0.0, "gemm"), HostSleepRecord(0, 400), RankFinished(400)])
    assert c.done
    s = summarise(c, tmp_path)
    assert s["asleep_s"] == 200e-9  # [300, 500): both hosts asleep (rank 1's ended at 400), both GPUs idle
    assert [r["busy_fraction"] for r in s["per_rank"]] == [100 / 400, 300 / 400]


def _trace_text(c, tmp_path) -> str:
    path = tmp_path / "trace_sleep.json"
    write_chrome_trace(path, c)
    return path.read_text()


def test_summary_and_trace_of_representative_ranks_that_are_not_the_first_ones(tmp_path):
    """A pipeline stage per node, the data-parallel axis folded: ranks 0, 1, 4 and 5 of 8 ran, each for two."""
    from phantora.protocol.symmetry import Axis, RankSymmetry

    symmetry = RankSymmetry(8, (Axis(2, 2),))
    network = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=2, gpus_per_node=4)),
                               compute_of=symmetry.representative)
    c = Coordinator(8, network, symmetry=symmetry)
    for rank in symmetry.representatives:
        c.submit(rank, [KernelRecord(0, 0, 100 * (rank + 1), "gemm", 1e9, 0.0, "gemm"),
                        HostSleepRecord(10, 50), RankFinished(600)])
    s = summarise(c, tmp_path, representatives=symmetry.representatives, processes=[])
    assert [r["rank"] for r in s["per_rank"]] == [0, 1, 4, 5] and s["representative_ranks"] == 4
    assert s["flops"] == 8e9 and s["kernels"] == 8  # every rank's, mirrors included
    assert s["simulated_time_s"] == 600e-9
    write_chrome_trace(tmp_path / "trace.json", c)
    pids = {e["pid"] for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if "pid" in e}
    assert len(pids) == 4
