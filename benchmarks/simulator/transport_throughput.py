"""Records per second through one rank's socket to the coordinator server.

    python -m benchmarks.simulator.transport_throughput [--records 2000000] [--batch 256]

A client process (a stand-in rank: `RankClient`, as the rank runtime uses it) sends kernel records in
batches, with a SyncRequest every 64 batches (one round trip each) and RankFinished at the end. The
server side is measured twice:
- wire: the server feeds a sink that only counts, so the number is the transport's own ceiling
  (framing, pickling, TCP, unpickling, the server loop);
- coordinator: the real Coordinator places every kernel (what a simulation gets).
The time runs from the client's first send to the server seeing RankFinished.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from phantora.engine.coordinator import Coordinator
from phantora.models.network import NetworkSimulator, Topology
from phantora.specs.cluster import cluster_from_flags
from phantora.protocol.records import KernelRecord, RankFinished, Record, SyncReply, SyncRequest
from phantora.transport.client import TOKEN_ENV_VAR, RankClient
from phantora.transport.server import CoordinatorServer

SYNC_EVERY_BATCHES = 64


class CountingSink:
    """Takes batches and answers syncs at once, doing no simulation: isolates the transport's cost."""

    world_size = 1
    representatives = (0,)
    safe_ns = 0

    def __init__(self) -> None:
        self.records = 0
        self.done = False

    def submit(self, rank: int, records: list[Record]) -> list[tuple[int, SyncReply]]:
        self.records += len(records)
        last = records[-1]
        if type(last) is RankFinished:
            self.done = True
        if type(last) is SyncRequest:
            return [(rank, SyncReply(last.request_id, last.host_ns, last.host_ns))]
        return []


def run_client(address: str, records: int, batch: int) -> None:
    """The stand-in rank: kernels with realistic names and shapes, in batches."""
    client = RankClient.connect(address, rank=0)
    host_ns = 0
    sent = 0
    batches = 0
    names = [f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{i}x128x64" for i in range(8)]
    while sent < records:
        n = min(batch, records - sent)
        out: list[Record] = []
        for i in range(n):
            host_ns += 1_000
            out.append(KernelRecord(0, host_ns, 5_000, names[i % 8], 2.0e9, 8.0e6, "gemm",
                                    "bf16[4096, 4096], bf16[4096, 4096]"))
        sent += n
        batches += 1
        if batches % SYNC_EVERY_BATCHES == 0:
            host_ns += 1
            out.append(SyncRequest(batches, host_ns, "device"))
            host_ns = client.request(out).host_ns
        else:
            client.send(out)
    client.send([RankFinished(host_ns + 1)])
    client.close()


def measure(sink, records: int, batch: int) -> float:
    server = CoordinatorServer(sink, 1)
    server.start()
    env = dict(os.environ, **{TOKEN_ENV_VAR: server.token})
    client = subprocess.Popen([sys.executable, __file__, "--client", server.address, "--records", str(records),
                               "--batch", str(batch)], env=env)
    # the clock starts once the client is up and connected, so interpreter start-up is not counted
    while server.progress().connected == 0 and client.poll() is None:
        time.sleep(0.001)
    started = time.perf_counter()
    server.wait()
    elapsed = time.perf_counter() - started
    if client.wait() != 0 or not server.finished:
        raise SystemExit(f"benchmark failed: client exit {client.returncode}, server failure {server.failure}")
    server.close()
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--client", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_client(args.client, args.records, args.batch)
        return
    wire = measure(CountingSink(), args.records, args.batch)
    network = NetworkSimulator(Topology(cluster_from_flags(gpu="h200", nodes=1, gpus_per_node=1)))
    engine = measure(Coordinator(1, network), args.records, args.batch)
    print(f"batches of {args.batch} kernel records, a sync every {SYNC_EVERY_BATCHES} batches:")
    print(f"  wire only (counting sink):  {wire / 1e3:8.0f} k records/s")
    print(f"  with the coordinator:       {engine / 1e3:8.0f} k records/s")


if __name__ == "__main__":
    main()
