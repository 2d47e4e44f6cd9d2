"""RankClient <-> CoordinatorServer over real localhost sockets: round trips, batching, errors,
disconnects, and identical results whatever the OS scheduling (random delays, random batching)."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from stand_in_rank import make_programs, replay

from phantora.engine.coordinator import Coordinator
from phantora.models.network import NetworkSimulator, Topology
from phantora.specs.cluster import cluster_from_flags
from phantora.protocol.records import CollectiveRecord, KernelRecord, RankFinished, SyncReply, SyncRequest
from phantora.transport.client import CoordinatorConnectionError, CoordinatorError, RankClient
from phantora.transport.delay import DELAY_ENV_VAR
from phantora.transport.server import CoordinatorServer

MiB = 1 << 20


def serve(world: int, *, start: bool = True) -> CoordinatorServer:
    network = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=world)))
    server = CoordinatorServer(Coordinator(world, network), world)
    if start:
        server.start()
    return server


def connect(server: CoordinatorServer, rank: int, **kwargs) -> RankClient:
    return RankClient.connect(server.address, rank, token=server.token, **kwargs)


def in_threads(*calls):
    """Run the calls concurrently; return their results or exceptions, in order."""
    def run(call):
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - the test inspects it
            return error
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def test_round_trip_batching_and_final_state():
    server = serve(1)
    with connect(server, 0) as client:
        client.send([KernelRecord(0, 10, 100, "a"), KernelRecord(0, 20, 50, "b")])
        client.send([KernelRecord(1, 30, 5, "c")])
        assert client.request([SyncRequest(1, 40, "device")]) == SyncReply(1, 160, 160)
        client.send([RankFinished(200)])
    assert server.wait(5) and server.finished and server.failure is None
    spans = server.coordinator.spans(0)
    assert [(s.name, s.start_ns, s.end_ns) for s in spans] == [("a", 10, 110), ("b", 110, 160), ("c", 30, 35)]
    progress = server.progress()
    assert (progress.records, progress.batches, progress.finished) == (5, 4, 1)
    server.close()


def test_a_batch_must_say_whether_it_waits():
    server = serve(1)
    with connect(server, 0) as client:
        with pytest.raises(ValueError, match="SyncRequest"):
            client.request([KernelRecord(0, 1, 1, "k")])
        with pytest.raises(ValueError, match="use request"):
            client.send([SyncRequest(1, 2, "device")])
    server.close()


def test_coordinator_error_stops_the_run_and_every_rank_raises():
    server = serve(2)
    a, b = connect(server, 0), connect(server, 1)
    a.send([CollectiveRecord(0, 10, (0, 1), 0, "all_reduce", MiB, None, "w")])
    with pytest.raises(CoordinatorError, match="does not match"):
        b.request([CollectiveRecord(0, 10, (0, 1), 0, "all_reduce", 2 * MiB, None, "w"), SyncRequest(1, 11, "device")])
    assert server.wait(5) and not server.finished
    assert server.failure.kind == "coordinator" and "does not match" in server.failure.message
    for _ in range(2):  # and keeps saying why, not "connection lost", once the server has closed
        with pytest.raises(CoordinatorError, match="does not match"):
            a.send([KernelRecord(0, 20, 1, "k")])
    a.close(), b.close()
    server.close()


def test_deadlock_is_reported_to_the_blocked_ranks():
    server = serve(2)
    a, b = connect(server, 0), connect(server, 1)
    def on_its_own_communicator(client, tag):  # each rank's all_reduce waits for the other on another tag
        return lambda: client.request([CollectiveRecord(0, 5, (0, 1), 0, "all_reduce", MiB, None, tag),
                                       SyncRequest(1, 6, "device")])
    results = in_threads(on_its_own_communicator(a, "x"), on_its_own_communicator(b, "y"))
    assert all(isinstance(r, CoordinatorError) and "cannot progress" in str(r) for r in results), results
    assert server.wait(5) and server.failure.kind == "deadlock" and "never issued by rank" in server.failure.message
    server.close()


def test_a_rank_that_disconnects_before_finishing_fails_the_run():
    server = serve(2)
    waiting = connect(server, 1)
    gone = connect(server, 0)
    gone.send([KernelRecord(0, 1, 10, "k")])
    blocked = threading.Thread(target=lambda: pytest.raises(
        CoordinatorError, waiting.request, [CollectiveRecord(0, 2, (0, 1), 0, "all_reduce", MiB, None, "w"),
                                            SyncRequest(1, 3, "device")]))
    blocked.start()
    gone.close()
    assert server.wait(5)
    assert server.failure.kind == "disconnect" and server.failure.rank == 0
    assert "rank 0 disconnected before it finished" in server.failure.message
    blocked.join(5)
    assert not blocked.is_alive()
    waiting.close()
    server.close()


def test_a_rank_that_exits_without_connecting_fails_the_run():
    server = serve(2)
    present = connect(server, 0)
    server.rank_exited(0)  # connected: not a failure (its connection will say how it ended)
    server.rank_exited(1)
    assert server.wait(5)
    assert server.failure.kind == "disconnect" and server.failure.rank == 1
    assert server.failure.message == "rank 1 exited without connecting to the coordinator"
    present.close()
    server.close()


def test_stray_clients_are_refused_without_harm():
    server = serve(1)
    with pytest.raises(CoordinatorError, match="refused"):
        RankClient.connect(server.address, 0, token="wrong")
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(b"GET / HTTP/1.0\r\n\r\n")
    time.sleep(0.05)
    with connect(server, 0) as client:
        client.send([RankFinished(1)])
    assert server.wait(5) and server.finished and server.failure is None
    server.close()


def test_a_rank_waits_for_a_late_server_and_gives_up_on_none():
    server = serve(1, start=False)  # listening already, answering only once started
    threading.Timer(0.3, server.start).start()
    started = time.monotonic()
    with connect(server, 0, timeout_s=10) as client:
        assert time.monotonic() - started >= 0.25
        client.send([RankFinished(1)])
    assert server.wait(5) and server.finished
    server.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    started = time.monotonic()
    with pytest.raises(CoordinatorConnectionError, match="cannot reach the coordinator"):
        RankClient.connect(f"127.0.0.1:{port}", 0, timeout_s=0.3)
    assert 0.25 <= time.monotonic() - started < 5


def test_stop_tells_waiting_ranks_why():
    server = serve(2)
    a = connect(server, 0)
    threading.Timer(0.2, server.stop, args=("stopped by the test",)).start()
    with pytest.raises(CoordinatorError, match="stopped by the test"):  # rank 1 never joins the all_reduce
        a.request([CollectiveRecord(0, 2, (0, 1), 0, "all_reduce", MiB, None, "w"), SyncRequest(1, 5, "device")])
    assert server.wait(5) and server.failure is None and not server.finished
    a.close()
    server.close()


def test_bad_delay_knob_is_a_clear_error(monkeypatch):
    server = serve(1)
    monkeypatch.setenv(DELAY_ENV_VAR, "soon")
    with pytest.raises(ValueError, match=DELAY_ENV_VAR):
        connect(server, 0)
    server.close()
    with pytest.raises(ValueError, match=DELAY_ENV_VAR):
        serve(1)


def run_programs(programs: list[list[tuple]]):
    """Every rank's program from its own thread, through its own socket; the coordinator's results."""
    world = len(programs)
    server = serve(world)

    def rank(r: int):
        with connect(server, r) as client:
            return replay(client, programs[r])
    outcomes = in_threads(*[lambda r=r: rank(r) for r in range(world)])
    assert server.wait(10) and server.finished, (server.failure, outcomes)
    c = server.coordinator
    server.close()
    return ([o[0] for o in outcomes], [c.spans(r) for r in range(world)], c.collectives(),
            [c.host_waits(r) for r in range(world)], [c.host_ns(r) for r in range(world)])


def test_results_do_not_depend_on_os_scheduling(monkeypatch):
    """Random real delays before every send and random batch boundaries: bit-identical simulations."""
    monkeypatch.setenv(DELAY_ENV_VAR, "2")
    programs = make_programs(seed=11, world=4, rounds=25)
    reference = run_programs(programs)
    replies, spans, collectives, _, _ = reference
    assert sum(map(len, replies)) > 8 and len(collectives) >= 20
    assert {c.tag for c in collectives} >= {"world", "even", "odd", "p2p"}
    assert any(s.collectives and s.start_ns < s.collectives[0].start_ns for per_rank in spans for s in per_rank)
    for _ in range(2):
        assert run_programs(programs) == reference


def test_ranks_of_other_machines_reach_a_server_by_its_advertised_name_and_shared_token():
    world = 1
    network = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=1)))
    with pytest.raises(ValueError, match="beyond loopback, needs a token"):
        CoordinatorServer(Coordinator(world, network), world, host="0.0.0.0")
    every_interface = "::" if socket.has_dualstack_ipv6() else "0.0.0.0"
    server = CoordinatorServer(Coordinator(world, network), world, host=every_interface, token="t" * 64,
                               advertise_host="127.0.0.1")
    server.start()
    try:
        assert server.address.startswith("127.0.0.1:") and server.token == "t" * 64
        client = connect(server, 0)
        client.send([RankFinished(0)])
        assert server.wait(10) and server.finished
    finally:
        server.close()
