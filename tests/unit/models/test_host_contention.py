"""Contended hosts (models/host_contention.py Note [Contended hosts]) and the session charging by them."""

from __future__ import annotations

import math

import pytest

from phantora.config.run import RankConfig
from phantora.models.host_contention import DEDICATED, HostContention, HostSpeed, contention_for
from phantora.protocol.records import HostSleepRecord
from phantora.runtime.session import Session
from phantora.specs import load_profile
from recording_transport import Recording

H200_VM = load_profile("h200").host_contention.value
"""The lent H200 VMs' hosts, where the host model was measured (Note [Contended hosts])."""


def test_places_keep_the_mean_host_and_order_the_ranks():
    """N hosts' expected factors average the mean host's; one host is the mean host; the slowest of many
    is almost surely contended, the fastest almost surely not."""
    p, c = H200_VM.contended_fraction, H200_VM.contended_factor
    mean = H200_VM.mean_factor()
    assert mean == pytest.approx(1 + (c - 1) * p)
    assert H200_VM.place_factors(1) == [pytest.approx(mean)]
    for n in (2, 4, 8, 32):
        places = H200_VM.place_factors(n)
        assert sum(places) / n == pytest.approx(mean)
        assert places == sorted(places) and places[0] < mean < places[-1]
    assert H200_VM.place_factors(4)[-1] == pytest.approx(1 + (c - 1) * (1 - (1 - p) ** 4))  # one of 4 contended
    assert H200_VM.place_factors(4)[0] == pytest.approx(1 + (c - 1) * p ** 4)  # all 4 contended
    assert H200_VM.place_factors(64)[-1] == pytest.approx(c, abs=1e-6)
    assert H200_VM.place_factors(64)[0] == pytest.approx(1.0, abs=1e-6)
    big = H200_VM.place_factors(8192)  # thousands of ranks: no overflow of the binomial terms
    assert sum(big) / len(big) == pytest.approx(mean) and big[-1] == pytest.approx(c) and big[0] == pytest.approx(1.0)
    assert DEDICATED.place_factors(4) == [1.0] * 4


def test_a_rank_keeps_its_place_for_the_dwell_time_and_the_places_move():
    """At any moment the ranks hold the N places, one each; the slowest place moves between ranks over time;
    a single process is the mean host; dedicated hosts are the mean host without its contention."""
    n, dwell_ns = 4, round(H200_VM.dwell_s * 1e9)
    mean = H200_VM.mean_factor()
    speeds = [HostSpeed(H200_VM, r, n, H200_VM) for r in range(n)]
    expected = sorted(f / mean for f in H200_VM.place_factors(n))
    slowest = set()
    for interval in range(40):
        t = interval * dwell_ns + dwell_ns // 2
        factors = [s.factor(t) for s in speeds]
        assert sorted(factors) == pytest.approx(expected)
        assert all(s.factor(interval * dwell_ns) == f for s, f in zip(speeds, factors))  # same interval, same place
        slowest.add(factors.index(max(factors)))
    assert slowest == set(range(n))
    again = HostSpeed(H200_VM, 2, n, H200_VM)
    assert [again.factor(t) for t in range(0, 40 * dwell_ns, dwell_ns)] == \
           [HostSpeed(H200_VM, 2, n, H200_VM).factor(t) for t in range(0, 40 * dwell_ns, dwell_ns)]  # deterministic
    assert HostSpeed(H200_VM, 0, 1, H200_VM).factor(123) == pytest.approx(1.0)
    assert HostSpeed(DEDICATED, 1, 4, H200_VM).factor(123) == pytest.approx(1 / mean)


def test_invalid_contention_and_ranks_are_refused():
    with pytest.raises(ValueError):
        HostContention(contended_fraction=1.5, contended_factor=1.5, dwell_s=1)
    with pytest.raises(ValueError):
        HostContention(contended_fraction=0.5, contended_factor=0.5, dwell_s=1)
    with pytest.raises(ValueError, match="outside"):
        HostSpeed(H200_VM, 4, 4, H200_VM)
    with pytest.raises(ValueError, match="--host-contention must be"):
        RankConfig(gpu="h200", host_contention="busy")
    with pytest.raises(ValueError, match="--host-contention must be"):
        contention_for("busy", H200_VM)
    assert contention_for("h200-vm", H200_VM) is H200_VM and contention_for("none", H200_VM) is DEDICATED


def _session(rank: int, world_size: int, contention: str = "h200-vm") -> Session:
    return Session(RankConfig(gpu="h200", rank=rank, world_size=world_size, host_contention=contention,
                              trace=False, use_kernel_database=False), Recording(), flush_interval_s=None)


def test_the_session_charges_host_work_at_its_ranks_speed_and_sleeps_in_full():
    """Host-model costs advance the clock times the rank's factor; a sleep (no CPU work) does not."""
    for rank in range(4):
        session = _session(rank, 4)
        factor = session.host_speed.factor(0)
        session.host_work(1_000_000)
        assert session.now_ns() == round(1_000_000 * factor)
        start = session.now_ns()
        session.host_wait(1_000_000)
        assert session.now_ns() - start == 1_000_000
    alone = _session(0, 1)
    alone.host_work(1_000_000)
    assert alone.now_ns() == 1_000_000
    dedicated = _session(0, 1, "none")
    dedicated.host_work(1_000_000)
    assert dedicated.now_ns() == round(1_000_000 / H200_VM.mean_factor())
    assert not math.isclose(dedicated.now_ns(), alone.now_ns())


def test_the_programs_sleeps_reach_the_coordinator_as_one_sleep_record():
    """`time.sleep` (Session.host_wait) is sent as a HostSleepRecord, so the summary keeps it apart from GPU
    idle time (reports/breakdown.py Note [The program's own sleep]); back-to-back sleeps extend one record,
    and a zero sleep (a yield) sends none."""
    session = _session(0, 1, "none")
    session.host_work(1000)
    for _ in range(3):
        session.host_wait(500)
    session.host_wait(0)
    session.host_work(1000)
    session.host_wait(200)
    session.finish()
    sleeps = [r for r in session.link.transport.records if isinstance(r, HostSleepRecord)]
    start = round(1000 / H200_VM.mean_factor())
    assert [(r.host_ns, r.until_ns) for r in sleeps] == [(start, start + 1500), (2 * start + 1500, 2 * start + 1700)]
