"""The engine timeline against hand-derived schedules (Note [Host runs ahead])."""

from phantora.engine.timeline import Timeline

S0, S1 = (0, 0), (0, 1)


def test_host_runs_ahead_and_stream_is_fifo():
    tl = Timeline(launch_latency_ns=1_000)
    tl.advance_host(5_000)
    a = tl.launch(S0, 10_000)
    tl.advance_host(2_000)
    b = tl.launch(S0, 10_000)
    assert (a.start_ns, a.end_ns) == (6_000, 16_000)
    # b was launched at host 7000 but waits for a: FIFO
    assert (b.start_ns, b.end_ns) == (16_000, 26_000)
    assert tl.host_ns == 7_000  # the host did not wait


def test_independent_streams_overlap_and_busy_counts_once():
    tl = Timeline()
    tl.launch(S0, 10_000)
    tl.launch(S1, 4_000)
    assert tl.device_tail(0) == 10_000
    assert tl.busy_ns(0) == 10_000
    tl.synchronize_device(0)
    assert tl.host_ns == 10_000 and tl.host_blocked_ns == 10_000


def test_wait_until_orders_streams():
    tl = Timeline()
    a = tl.launch(S0, 10_000)
    tl.wait_until(S1, a.end_ns)  # S1 waits for an event recorded after a
    b = tl.launch(S1, 1_000)
    assert b.start_ns == 10_000


def test_synchronize_stream_waits_only_for_that_stream():
    tl = Timeline()
    tl.launch(S0, 10_000)
    tl.launch(S1, 3_000)
    tl.synchronize_stream(S1)
    assert tl.host_ns == 3_000
    tl.block_host_until(1_000)  # already past: no effect
    assert tl.host_ns == 3_000 and tl.host_blocked_ns == 3_000


def test_busy_with_gaps():
    tl = Timeline()
    tl.launch(S0, 1_000)
    tl.advance_host(5_000)
    tl.launch(S0, 1_000)
    assert tl.busy_ns(0) == 2_000
    assert tl.busy_ns(1) == 0
