"""A stand-in rank: replays a fixed record program through a real RankClient, no torch.

Used two ways:
- imported: `make_programs(seed, world)` gives every rank's program (kernels on two streams,
  collectives on several communicators, p2p and coalesced exchanges, events, stream waits, syncs of
  every kind) and `replay(client, program)` runs one, with random batch boundaries;
- as a rank process (the launcher's rank entry in tests): `python stand_in_rank.py PROGRAM ARGS`, reads
  its RankConfig from $PHANTORA_RUN_CONFIG like the real runtime, prints, replays its program, writes
  `<out>/rank<N>/result.json`, and misbehaves on request (see `parse_args`).

Program steps are plain tuples, so they pickle and print.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from phantora.protocol.records import (
    CoalescedRecord,
    CollectiveRecord,
    EventRecordRecord,
    HostTimeRecord,
    KernelRecord,
    RankFinished,
    StreamWaitRecord,
    SyncReply,
    SyncRequest,
)

MiB = 1 << 20
STAND_IN = Path(__file__).resolve()
"""This file, the rank entry of launcher tests (`python STAND_IN SCRIPT ARGS`)."""
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "reduce", "barrier"]


def make_programs(seed: int, world: int, rounds: int = 30) -> list[list[tuple]]:
    """Every rank's program; collectives follow one global order, so the programs cannot deadlock."""
    rng = random.Random(seed)
    groups = {"world": tuple(range(world)), "even": tuple(range(0, world, 2)), "odd": tuple(range(1, world, 2))}
    groups = {tag: g for tag, g in groups.items() if g}
    seqs: dict = {}
    progs: list[list[tuple]] = [[] for _ in range(world)]
    events = [0] * world

    def nxt(key) -> int:
        seqs[key] = seqs.get(key, -1) + 1
        return seqs[key]

    for _ in range(rounds):
        for r in range(world):
            for _ in range(rng.randrange(4)):
                roll, stream = rng.random(), rng.randrange(2)
                if roll < 0.5:
                    progs[r].append(("kernel", stream, rng.randrange(1, 200_000), f"k{rng.randrange(5)}"))
                elif roll < 0.65:
                    events[r] += 1
                    progs[r].append(("event", events[r], stream))
                elif roll < 0.75 and events[r]:
                    progs[r].append(("wait", stream, rng.randint(1, events[r])))
                elif roll < 0.9:
                    kind = rng.choice(["device", "stream", "event"])
                    progs[r].append(("sync", kind, stream, rng.randint(0, events[r])))
                else:
                    progs[r].append(("host", rng.randrange(100_000)))
        roll = rng.random()
        size = rng.choice([4096, MiB, 16 * MiB])
        if world > 1 and roll < 0.2:
            src, dst = rng.sample(range(world), 2)
            seq = nxt(("p2p", src, dst))
            progs[src].append(("coll", rng.randrange(2), "p2p", (src, dst), seq, "send", size, None))
            progs[dst].append(("coll", rng.randrange(2), "p2p", (src, dst), seq, "recv", size, None))
        elif world > 1 and roll < 0.3:
            a, b = rng.sample(range(world), 2)
            sab, sba = nxt(("p2p", a, b)), nxt(("p2p", b, a))
            for me, peer, s_out, s_in in ((a, b, sab, sba), (b, a, sba, sab)):
                progs[me].append(("coalesced", rng.randrange(2), (("p2p", (me, peer), s_out, "send", size),
                                                                  ("p2p", (peer, me), s_in, "recv", size))))
        else:
            tag = rng.choice(sorted(groups))
            group, op = groups[tag], rng.choice(OPS)
            root = rng.choice(group) if op in ("broadcast", "reduce") else None
            seq = nxt(tag)
            for r in group:
                progs[r].append(("coll", rng.randrange(2), tag, group, seq, op, size, root))
    for r in range(world):
        progs[r].append(("sync", "device", 0, 0))
    return progs


def _record(step: tuple, host_ns: int, request_id: int):
    kind = step[0]
    if kind == "kernel":
        _, stream, duration, name = step
        return KernelRecord(stream, host_ns, duration, name, 1.0e9, 1.0e6, "gemm", "bf16[64, 64]")
    if kind == "event":
        return EventRecordRecord(step[1], step[2], host_ns)
    if kind == "wait":
        return StreamWaitRecord(step[1], step[2], host_ns)
    if kind == "sync":
        _, sync_kind, stream, event = step
        return SyncRequest(request_id, host_ns, sync_kind, stream if sync_kind == "stream" else None,
                           event if sync_kind == "event" else None)
    if kind == "host":
        return HostTimeRecord(host_ns)
    if kind == "coll":
        _, stream, tag, group, seq, op, size, root = step
        return CollectiveRecord(stream, host_ns, tuple(group), seq, op, size, root, tag)
    if kind == "coalesced":
        _, stream, parts = step
        return CoalescedRecord(stream, host_ns, tuple(
            CollectiveRecord(stream, host_ns, tuple(g), seq, op, size, None, tag) for tag, g, seq, op, size in parts))
    raise ValueError(f"unknown step {step!r}")


def replay(client, program: list[tuple], *, step_ns: int = 1_000, max_batch: int = 8,
           rng: random.Random | None = None, finish: bool = True) -> tuple[list[SyncReply], int]:
    """Send the program through `client` (host clock: +step_ns per step, + a "host" step's time, and the
    reply's host time after each sync); batch boundaries are random. Returns the replies and the final
    host clock (RankFinished is sent too)."""
    rng = rng or random.Random(int.from_bytes(os.urandom(8), "little"))
    host_ns, replies, batch = 0, [], []
    limit = rng.randint(1, max_batch)
    for step in program:
        host_ns += step_ns + (step[1] if step[0] == "host" else 0)
        record = _record(step, host_ns, len(replies) + 1)
        batch.append(record)
        if type(record) is SyncRequest:
            reply = client.request(batch)
            replies.append(reply)
            host_ns = max(host_ns, reply.host_ns)
            batch, limit = [], rng.randint(1, max_batch)
        elif len(batch) >= limit:
            client.send(batch)
            batch, limit = [], rng.randint(1, max_batch)
    if finish:
        batch.append(RankFinished(host_ns + step_ns))
    if batch:
        client.send(batch)
    return replies, host_ns + step_ns


# --- as a rank process ----------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("script", help="the user's script path (ignored: this stands in for it)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--lines", type=int, default=2, help="lines each rank prints")
    parser.add_argument("--fail-rank", type=int, default=None, help="this rank raises after connecting")
    parser.add_argument("--exit-code", type=int, default=3, help="... and exits with this code")
    parser.add_argument("--mismatch-rank", type=int, default=None,
                        help="this rank sends an all_reduce of a different size (a coordinator error)")
    parser.add_argument("--hang-rank", type=int, default=None, help="this rank sleeps forever after connecting")
    parser.add_argument("--no-connect-rank", type=int, default=None, help="this rank exits 0 without connecting")
    parser.add_argument("--finish-then-fail-rank", type=int, default=None,
                        help="this rank reports RankFinished at once, then exits 4 (as the runtime does when the "
                             "program raised)")
    parser.add_argument("--spin-rank", type=int, default=None,
                        help="this rank loops in Python forever after a synchronization (a hang while peers wait)")
    parser.add_argument("--kill-self-rank", type=int, default=None,
                        help="this rank kills itself with --kill-signal halfway through its program")
    parser.add_argument("--kill-signal", default="SIGKILL", help="the signal --kill-self-rank uses")
    parser.add_argument("--pg-timeout", type=float, default=None,
                        help="report an all_reduce of a process group with this timeout (s) as the last NCCL call, "
                             "as the runtime does for init_process_group(timeout=...)")
    parser.add_argument("--spin-before-connect-rank", type=int, default=None,
                        help="this rank loops in Python forever before it connects (a hang in its start-up)")
    parser.add_argument("--drop-connection-rank", type=int, default=None,
                        help="this rank closes its connection to the coordinator halfway, then sleeps")
    parser.add_argument("--leave-children", metavar="MARKER", default=None,
                        help="start processes that would outlive the rank, MARKER in their command lines: one in the "
                             "rank's process group, one that calls setsid, one orphaned at once (a double fork)")
    parser.add_argument("--env-dump", action="store_true",
                        help="print the launcher's variables and this process's arguments as JSON")
    parser.add_argument("--local_rank", type=int, default=None, help="as DeepSpeed's launcher passes it")
    return parser.parse_args(argv)


ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
            "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
            "OMP_NUM_THREADS", "TORCHELASTIC_ERROR_FILE", "PHANTORA_RUN_CONFIG",
            "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "CUDA_VISIBLE_DEVICES", "ACCELERATE_MIXED_PRECISION")


def write_result(out_dir: Path, rank: int, exit_code: int, host_ns: int) -> None:
    folder = out_dir / f"rank{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    result = {"rank": rank, "exit_code": exit_code, "host_ns": host_ns,
              "devices": [{"peak_allocated_bytes": (rank + 1) << 30, "peak_reserved_bytes": (rank + 2) << 30,
                           "num_ooms": 0}],
              "host_only_ops": 5, "kernel_sources": {"database": 3}, "generic_ops": {},
              "placeholders": {".item()": 1}, "warnings": [f"stand-in rank {rank}"],
              "simulator_cpu_s": 0.1, "simulator_peak_rss_bytes": 50 << 20}
    (folder / "result.json").write_text(json.dumps(result))


def leave_children(marker: str) -> None:
    """Processes that outlive this rank unless the launcher ends them."""
    import subprocess

    sleep = "import os, sys, time; {}time.sleep(3600)"
    subprocess.Popen([sys.executable, "-c", sleep.format(""), marker])
    subprocess.Popen([sys.executable, "-c", sleep.format("os.setsid(); "), marker])
    subprocess.Popen([sys.executable, "-c", sleep.format("os.setsid(); os.fork() and os._exit(0); "), marker])


def rank_status(rank: int, pg_timeout_s: float | None):
    """What the runtime reports (runtime/bootstrap.py `status_source`): the peaks `write_result` writes, and with a
    process-group timeout, an all_reduce of that group as the last NCCL call."""
    from phantora.transport.wire import RankStatus

    peaks = (((rank + 1) << 30, (rank + 2) << 30),)
    if pg_timeout_s is None:
        return RankStatus(peaks)
    work = f"WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={int(pg_timeout_s * 1000)})"
    return RankStatus(peaks, work, rank, pg_timeout_s)


def spin_forever() -> None:
    """A Python loop that never ends (a hang the launcher's watchdog must find)."""
    n = 0
    while True:
        n += 1


def main() -> int:
    from phantora.config.run import RankConfig
    from phantora.transport.client import RankClient

    args = parse_args(sys.argv[1:])
    config = RankConfig.from_env()
    rank = config.rank
    if args.env_dump:
        error_dir = os.path.dirname(os.environ.get("TORCHELASTIC_ERROR_FILE", ""))
        print("ENV " + json.dumps({**{k: os.environ.get(k) for k in ENV_KEYS}, "argv": sys.argv[1:],
                                   "error_file_folder_exists": os.path.isdir(error_dir)}))
    for i in range(args.lines):
        print(f"hello {i} from rank {rank} of {config.world_size}")
    print(f"rank {rank} stderr line", file=sys.stderr)
    if rank == args.no_connect_rank:
        return 0
    if rank == args.spin_before_connect_rank:
        spin_forever()
    client = RankClient.connect(config.coordinator, rank=rank)
    client.status = lambda: rank_status(rank, args.pg_timeout)
    if args.leave_children:
        leave_children(args.leave_children)
        print(f"rank {rank} started its children", flush=True)
    if rank == args.fail_rank:
        try:
            raise RuntimeError(f"stand-in rank {rank} fails on purpose")
        except RuntimeError:
            import traceback
            traceback.print_exc()
        write_result(Path(config.out_dir), rank, args.exit_code, 0)
        return args.exit_code
    if rank == args.finish_then_fail_rank:
        client.send([RankFinished(1)])
        client.close()
        print("Traceback (most recent call last):\nValueError: failed after finishing", file=sys.stderr)
        return 4
    if rank == args.hang_rank:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        time.sleep(3600)
    program = make_programs(args.seed, config.world_size, args.rounds)[rank]
    if rank == args.mismatch_rank:
        program.insert(0, ("coll", 0, "world", tuple(range(config.world_size)), 10_000, "all_reduce", 999, None))
    elif args.mismatch_rank is not None:
        program.insert(0, ("coll", 0, "world", tuple(range(config.world_size)), 10_000, "all_reduce", 1000, None))
    if rank in (args.kill_self_rank, args.drop_connection_rank, args.spin_rank):
        program = program[:len(program) // 2] + [("sync", "device", 0, 0)]
        replay(client, program, finish=False)
        if rank == args.kill_self_rank:
            os.kill(os.getpid(), signal.Signals[args.kill_signal])
        if rank == args.drop_connection_rank:
            client.close()
            time.sleep(3600)
        spin_forever()
    replies, host_ns = replay(client, program)
    client.close()
    print(f"rank {rank} done after {len(replies)} syncs at {host_ns} ns")
    write_result(Path(config.out_dir), rank, 0, host_ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
