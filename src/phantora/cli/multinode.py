"""One job, several launchers: `phantora torchrun --nnodes N --node-rank K --rdzv-endpoint HOST:PORT ...` on
each machine, every launcher starting its own node's rank processes.

    launch_node(config)     # config.rendezvous: where node 0 is, this launcher's node rank, the shared secret

Note: [One job, several launchers]
Node 0's launcher hosts what the job shares: the rendezvous store (a c10d TCPStore at the endpoint, as
torchrun's c10d rendezvous hosts one) and the coordinator, whose server listens where the other machines
reach it. Through the store:
- node 0 publishes the job (`job`: nodes, ranks per node, GPU, the coordinator's port, MASTER_PORT and a
  fresh nonce); the others check that they launch the same job, claim their node rank (`joined/K`; under
  the c10d backend node ranks are handed out in the order the launchers join) and start their ranks,
  which connect to the coordinator over TCP with a token derived from the shared secret and the nonce
  (an HMAC: the secret itself never crosses the network, and a token seen on the wire is good for this
  run only);
- every other launcher beats (`alive/K`, every `HEARTBEAT_S`) and reports each of its ranks' exits
  (`exit/K/i`): node 0 hands them to its server as it does its own ranks' exits, so a rank of node 1 that
  dies before connecting fails the job as one of node 0 would;
- node 0 says when the job is over (`stop`: finished or failed) and, after writing the reports, its
  outcome (`verdict`: exit code and error line); the others send their ranks' result files
  (`results/K`) once their ranks have exited, so node 0's reports cover every rank without a shared disk.
Every value in the store carries an HMAC of its key and body under the shared secret: the TCPStore
itself (torch's) authenticates nobody, and nothing unsigned is believed.

Failures: a rank of node K that exits non-zero makes its launcher stop its other ranks and node 0 stop
the job (the root cause is that rank, with its host, exit code and stderr). A launcher that stops beating
for `PEER_TIMEOUT_S` fails the job on node 0 ("the launcher of node K stopped answering"); a launcher
that loses node 0's store stops its ranks and exits 1 with one line naming node 0. Representative ranks
are not used across launchers: every rank runs (a note says so when `--ranks auto` would fold).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TextIO

from phantora.cli.failure import CoordinatorFault, RankExit
from phantora.cli.launch import (LaunchConfig, LaunchError, _clear_stale_outputs, _fork_server, _Launcher, _Outcome,
                                 _raise_open_file_limit, _Rank, _reap, _SignalCatcher, rank_environment)
from phantora.cli.output import OutputPump
from phantora.cli.processes import new_job_id, own_start_ticks, set_child_subreaper
from phantora.protocol.symmetry import RankSymmetry
from phantora.reports.summary import ProcessUsage
from phantora.transport.server import CoordinatorServer

HEARTBEAT_S = 1.0
"""How often a launcher tells node 0 it is alive."""
PEER_TIMEOUT_S = 10.0
"""A launcher silent this long is gone: ten heartbeats, so a machine busy starting many ranks is not taken
for dead."""
STORE_OP_TIMEOUT_S = 10.0
"""One store operation on a reachable store takes milliseconds; one this slow means node 0 is unreachable."""
DEFAULT_JOIN_TIMEOUT_S = 600.0
"""How long the launchers wait for each other to join: torchrun's c10d `join_timeout` default."""
RESULTS_TIMEOUT_S = 60.0
"""After the job ended, how long node 0 waits for another launcher's result files beyond its grace period."""
_PREFIX = "phantora/"
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_RESULT_PATH = re.compile(r"rank(\d+)/([A-Za-z0-9_.-]+)")


@dataclass(frozen=True, slots=True)
class RendezvousSpec:
    """Where the launchers meet and what they share."""

    host: str
    """Node 0's machine, as the others reach it: the rendezvous endpoint's host."""
    port: int
    node_rank: int | None
    """This launcher's node; None: handed out by the rendezvous (c10d: the endpoint's machine is node 0)."""
    secret: str = field(repr=False)
    """The secret every launcher was given (--secret-file or $PHANTORA_SECRET)."""
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S

    @property
    def loopback(self) -> bool:
        return self.host in _LOOPBACK

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


class RendezvousError(LaunchError):
    """The launchers could not meet, or one of them went away (one line)."""


# --- the store, signed ------------------------------------------------------------------------------
class _SignedStore:
    """The rendezvous TCPStore with every value signed under the shared secret (the store authenticates
    nobody); any failure to reach it is a RendezvousError."""

    def __init__(self, store: Any, secret: str, endpoint: str) -> None:
        self._store = store
        self._key = hashlib.sha256(b"phantora store " + secret.encode()).digest()
        self._endpoint = endpoint

    def _mac(self, key: str, body: bytes) -> str:
        return hmac.new(self._key, key.encode() + b"\0" + body, hashlib.sha256).hexdigest()

    def put(self, key: str, value: object) -> None:
        body = json.dumps(value).encode()
        self._call(self._store.set, _PREFIX + key, json.dumps({"mac": self._mac(key, body), "body": body.decode()}))

    def take(self, key: str) -> Any | None:
        """The value at `key`, None while there is none; a value not signed with the secret is an error."""
        if not self._call(self._store.check, [_PREFIX + key]):
            return None
        raw = json.loads(self._call(self._store.get, _PREFIX + key))
        body = raw["body"].encode()
        if not hmac.compare_digest(raw["mac"], self._mac(key, body)):
            raise RendezvousError(f"the rendezvous at {self._endpoint} holds a {key!r} not signed with this "
                                  "launcher's secret: the launchers were given different secrets")
        return json.loads(body)

    def add(self, key: str, amount: int) -> int:
        """A counter (unsigned: only beats and counts, checked against signed values where it matters)."""
        return self._call(self._store.add, _PREFIX + key, amount)

    def _call(self, op: Any, *args: Any) -> Any:
        try:
            return op(*args)
        except (RuntimeError, TimeoutError, OSError) as error:  # torch's DistStoreError is a RuntimeError
            raise RendezvousError(f"lost the rendezvous store at {self._endpoint} (node 0's launcher): "
                                  f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None


def _open_store(spec: RendezvousSpec, *, host: bool) -> Any:
    from torch.distributed import TCPStore  # only here: a launcher otherwise imports no torch

    timeout = timedelta(seconds=spec.join_timeout_s)
    store = TCPStore(spec.host, spec.port, is_master=host, wait_for_workers=False, timeout=timeout)
    store.set_timeout(timedelta(seconds=STORE_OP_TIMEOUT_S))
    return store


def _host_store(spec: RendezvousSpec) -> Any | None:
    """Host the rendezvous store if this launcher is node 0: under the static backend `--node-rank 0`; under
    c10d the first launcher on the endpoint's machine to bind its port (as torch's c10d rendezvous). None:
    another launcher hosts it."""
    if spec.node_rank is None and not _is_this_machine(spec.host):
        return None
    if spec.node_rank not in (None, 0):
        return None
    try:
        return _open_store(spec, host=True)
    except (RuntimeError, OSError) as error:
        if spec.node_rank == 0:
            raise RendezvousError(f"cannot host the rendezvous at {spec.endpoint} (node 0): "
                                  f"{str(error).splitlines()[0]}") from None
        return None  # the port is taken: another launcher of this machine hosts it


def _is_this_machine(host: str) -> bool:
    """Whether `host` names an address of this machine (one a socket here can bind)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind((address[0], 0))
                return True
        except OSError:
            continue
    return False


def coordinator_token(secret: str, nonce: str) -> str:
    """What a rank presents in its Hello: an HMAC of this run's nonce under the shared secret."""
    return hmac.new(secret.encode(), b"phantora coordinator " + nonce.encode(), hashlib.sha256).hexdigest()


# --- the entry --------------------------------------------------------------------------------------
def launch_node(config: LaunchConfig, *, console_out: TextIO | None = None, console_err: TextIO | None = None) -> int:
    """Run this launcher's node of a job that spans several (Note [One job, several launchers])."""
    spec = config.rendezvous
    assert spec is not None
    out, err = console_out or sys.stdout, console_err or sys.stderr
    if config.ranks == "auto":
        print("phantora: note: a job of several launchers runs every rank (representative ranks fold ranks within "
              "one launcher only)", file=err)
    config = replace(config, ranks="all", workers=replace(config.workers, master_addr=spec.host))  # rank 0's store
    hosted = _host_store(spec)
    if hosted is not None:
        return _HostLauncher(config, out, err, _SignedStore(hosted, spec.secret, spec.endpoint)).run()
    try:
        store = _SignedStore(_open_store(spec, host=False), spec.secret, spec.endpoint)
    except (RuntimeError, OSError) as error:
        raise RendezvousError(f"cannot reach the rendezvous at {spec.endpoint} (node 0's launcher) within "
                              f"{spec.join_timeout_s:g} s: {str(error).splitlines()[0]}") from None
    job = _wait_for(store, "job", spec.join_timeout_s, f"node 0's launcher did not publish the job at {spec.endpoint}")
    node = _claim_node(store, spec, job)
    try:
        _check_same_job(config, job, node)
    except RendezvousError as error:
        store.put(f"stopped/{node}", {"reason": str(error)})  # node 0 stops at once, not at its timeout
        raise
    workers = replace(config.workers, master_port=job["master_port"])
    return _NodeLauncher(replace(config, workers=workers), out, err, store, node, job).run()


def _wait_for(store: _SignedStore, key: str, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while (value := store.take(key)) is None:
        if time.monotonic() >= deadline:
            raise RendezvousError(f"{what} within {timeout_s:g} s")
        time.sleep(0.1)
    return value


def _claim_node(store: _SignedStore, spec: RendezvousSpec, job: dict) -> int:
    node = spec.node_rank if spec.node_rank is not None else store.add("next_node", 1)
    if not 0 < node < job["nnodes"]:
        raise RendezvousError(f"node rank {node} is not one of the job's other nodes (1..{job['nnodes'] - 1}): "
                              f"more launchers than --nnodes {job['nnodes']}")
    if store.add(f"joined/{node}", 1) != 1:
        raise RendezvousError(f"node {node} joined twice: two launchers were given --node-rank {node}")
    return node


def _check_same_job(config: LaunchConfig, job: dict, node: int) -> None:
    ours = {"nnodes": config.nnodes, "nproc_per_node": config.nproc_per_node, "gpu": config.cluster.gpu}
    theirs = {key: job[key] for key in ours}
    if ours != theirs:
        differ = ", ".join(f"{key} {ours[key]} here, {theirs[key]} on node 0" for key in ours if ours[key] != theirs[key])
        raise RendezvousError(f"node {node} was launched for another job than node 0: {differ}")


def _node_ranks(config: LaunchConfig, node: int) -> range:
    return range(node * config.nproc_per_node, (node + 1) * config.nproc_per_node)


@dataclass(slots=True)
class _Peer:
    """What node 0 knows of another launcher."""

    node: int
    beats: int = 0
    heard_s: float = 0.0
    exits_seen: int = 0
    exits: dict[int, dict] = field(default_factory=dict)
    results: dict | None = None


# --- node 0 -----------------------------------------------------------------------------------------
class _HostLauncher(_Launcher):
    """Node 0: the coordinator and the rendezvous store for every node, and its own node's ranks."""

    def __init__(self, config: LaunchConfig, out: TextIO, err: TextIO, store: _SignedStore) -> None:
        self.rendezvous = config.rendezvous
        self.store = store
        self.nonce = secrets.token_hex(16)
        super().__init__(config, out, err, RankSymmetry.everyone(config.world_size), [])
        self.peers = {node: _Peer(node) for node in range(1, config.nnodes)}
        self._joined_by = 0.0
        self._next_watch = 0.0
        self._remote_root: RankExit | None = None

    def _new_server(self) -> CoordinatorServer:
        spec = self.rendezvous
        # loopback: ranks of other launchers on this machine only; else every interface, for other machines
        every_interface = "::" if socket.has_dualstack_ipv6() else "0.0.0.0"
        return CoordinatorServer(self.coordinator, self.processes, host="127.0.0.1" if spec.loopback else every_interface,
                                 token=coordinator_token(spec.secret, self.nonce), advertise_host=spec.host)

    def _spawned_ranks(self) -> range:
        return _node_ranks(self.config, 0)

    def _spawn_all(self) -> None:
        cfg = self.config
        self.store.put("job", {"nnodes": cfg.nnodes, "nproc_per_node": cfg.nproc_per_node, "gpu": cfg.cluster.gpu,
                               "coordinator_port": int(self.server.address.rpartition(":")[2]),
                               "master_port": self.master_port, "nonce": self.nonce})
        self._joined_by = time.monotonic() + self.rendezvous.join_timeout_s
        super()._spawn_all()

    def _supervise(self) -> _Outcome:
        outcome = super()._supervise()
        self.store.put("stop", {"failed": not (outcome.root is None and outcome.signal is None)})
        return outcome

    def _detect_fault(self) -> Any:
        """As for one launcher (Note [Which failure is the root cause]), with the other launchers' ranks: one
        the server saw fail, or one whose launcher reported it exited non-zero, is the root cause."""
        if time.monotonic() >= self._next_watch:
            self._next_watch = time.monotonic() + min(HEARTBEAT_S, 5 * self.config.monitor_interval_s)
            fault = self._watch_peers()
            if fault is not None:
                return fault
        failure = self.server.failure
        if failure is not None and failure.rank is not None and failure.rank not in self._spawned_ranks():
            event = self._remote_event(failure.rank)
            while event is None and not self._grace_over():  # its launcher reports the exit (code, pid) in a moment
                self.pump.poll(0.05)
                fault = self._watch_peers()
                if fault is not None:
                    return fault
                event = self._remote_event(failure.rank)
            if event is not None:
                return self._remote_culprit(event, note=failure.message)
        elif failure is None:
            failed = next((e for p in self.peers.values() for e in p.exits.values() if e["exit_code"] != 0), None)
            if failed is not None:
                return self._remote_culprit(failed)
        return super()._detect_fault()

    def _remote_event(self, rank: int) -> dict | None:
        return self.peers[rank // self.config.nproc_per_node].exits.get(rank)

    def _remote_culprit(self, event: dict, note: str = "") -> RankExit:
        """A rank of another launcher as the root cause (its stderr comes with that launcher's results)."""
        self._remote_root = RankExit(rank=event["rank"], local_rank=event["local_rank"], pid=event["pid"],
                                     exit_code=event["exit_code"], wall_time=event["wall_time"],
                                     error_file=str(self.config.out_dir / f"rank{event['rank']}" / "error.json"),
                                     note=note, host=event["host"])
        return self._remote_root

    def _watch_peers(self) -> Any:
        """Take in the other launchers' rank exits; a launcher that left or never came is the job's failure."""
        now = time.monotonic()
        for peer in self.peers.values():
            stopped = self.store.take(f"stopped/{peer.node}")
            if stopped is not None:
                return CoordinatorFault(f"phantora: the launcher of node {peer.node} stopped: {stopped['reason']}",
                                        time.time())
            beats = self.store.add(f"alive/{peer.node}", 0)
            if beats != peer.beats:
                peer.beats, peer.heard_s = beats, now
            elif peer.beats and now - peer.heard_s > PEER_TIMEOUT_S:
                return CoordinatorFault(f"phantora: the launcher of node {peer.node} stopped answering "
                                        f"({PEER_TIMEOUT_S:g} s without a heartbeat): its machine or process is gone",
                                        time.time())
            elif not peer.beats and now > self._joined_by:
                return CoordinatorFault(f"phantora: node {peer.node}'s launcher did not join the rendezvous at "
                                        f"{self.rendezvous.endpoint} within {self.rendezvous.join_timeout_s:g} s",
                                        time.time())
            count = self.store.add(f"exits/{peer.node}", 0)
            while peer.exits_seen < count:
                event = self.store.take(f"exit/{peer.node}/{peer.exits_seen}")
                if event is None:
                    break
                peer.exits[event["rank"]] = event
                peer.exits_seen += 1
                self.server.rank_exited(event["rank"])
        return None

    def _process_usage(self) -> list[ProcessUsage]:
        remote = [ProcessUsage(rank=u["rank"], peak_rss_bytes=u["peak_rss_bytes"], cpu_s=u["cpu_s"])
                  for p in self.peers.values() if p.results for u in p.results["usage"]]
        return sorted(super()._process_usage() + remote, key=lambda u: u.rank)

    def _finish(self, outcome: _Outcome, wall_s: float) -> int:
        self._gather_results()
        root = self._remote_root
        if root is not None and outcome.root is root:
            peer = self.peers[root.rank // self.config.nproc_per_node]
            tail = tuple(peer.results["stderr_tails"].get(str(root.rank), ())) if peer.results else ()
            outcome = replace(outcome, root=replace(root, stderr_tail=tail))
        code = super()._finish(outcome, wall_s)
        resolved = self._resolve(outcome.root)
        error = None if code == 0 else self._error_line(outcome, resolved)
        try:
            self.store.put("verdict", {"exit_code": code, "error": error, "out_dir": str(self.config.out_dir)})
            deadline = time.monotonic() + PEER_TIMEOUT_S  # the others read it before this process (the store) ends
            joined = len(self._joined_peers())
            while self.store.add("done", 0) < joined and time.monotonic() < deadline:
                time.sleep(0.05)
        except RendezvousError:
            pass  # the store is this process's: nothing to lose
        return code

    def _joined_peers(self) -> list[_Peer]:
        return [p for p in self.peers.values() if self.store.add(f"joined/{p.node}", 0)]

    def _gather_results(self) -> None:
        """Every other launcher's rank result files, into this run's output folder (no shared disk assumed)."""
        deadline = time.monotonic() + self.config.shutdown_grace_s + RESULTS_TIMEOUT_S
        waiting = {p.node: p for p in self._joined_peers()}  # a launcher that never joined sends nothing
        for peer in waiting.values():
            peer.heard_s = time.monotonic()
        while waiting and time.monotonic() < deadline:
            for peer in list(waiting.values()):
                peer.results = self.store.take(f"results/{peer.node}")
                if peer.results is not None:
                    self._write_results(peer)
                    del waiting[peer.node]
                    continue
                beats, now = self.store.add(f"alive/{peer.node}", 0), time.monotonic()
                if beats != peer.beats:
                    peer.beats, peer.heard_s = beats, now
                elif now - peer.heard_s > PEER_TIMEOUT_S:
                    del waiting[peer.node]  # gone
            time.sleep(0.05)
        for peer in waiting.values():
            self.pump.say(f"phantora: node {peer.node}'s launcher sent no results in time; its ranks' numbers are "
                          "left out")

    def _write_results(self, peer: _Peer) -> None:
        own = _node_ranks(self.config, peer.node)
        for path, data in peer.results["files"].items():
            match = _RESULT_PATH.fullmatch(path)
            if match is None or int(match[1]) not in own:
                continue  # only its own ranks' files, and only plain names in their folders
            target = self.config.out_dir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(data))


# --- the other nodes --------------------------------------------------------------------------------
class _NodeLauncher(_Launcher):
    """Node K > 0: its own ranks only; node 0's coordinator serves them (no coordinator or server here)."""

    def __init__(self, config: LaunchConfig, out: TextIO, err: TextIO, store: _SignedStore, node: int,
                 job: dict) -> None:
        # the parts of _Launcher that spawn, stop and reap rank processes; the coordinator is node 0's
        self.config = config
        self.world_size = config.world_size
        self.symmetry = RankSymmetry.everyone(config.world_size)
        self.used_groups = []
        self.processes = config.nproc_per_node
        role = config.workers.role if config.workers else "default"
        self.pump = OutputPump(config.output, console_out=out, console_err=err, role=role)
        self.ranks: list[_Rank] = []
        self.exit_order: list[_Rank] = []
        self.signals = _SignalCatcher()
        self.master_port = job["master_port"]
        self._store = None
        self._owns_forks, self.forks = True, _fork_server()
        self.job_id = new_job_id()
        self.guardian = None
        self.store, self.node, self.job = store, node, job
        spec = config.rendezvous
        self.coordinator_address = f"{spec.host}:{job['coordinator_port']}"
        self.token = coordinator_token(spec.secret, job["nonce"])
        self._posted = 0
        self._beat = _Heartbeat(spec, node)

    def _spawned_ranks(self) -> range:
        return _node_ranks(self.config, self.node)

    def _rank_env(self, rank: int, local_rank: int) -> dict[str, str]:
        rank_config = replace(self.config.rank_config, rank=rank, world_size=self.world_size,
                              coordinator=self.coordinator_address, folded_axes=self.symmetry.to_json())
        return rank_environment(self.config, rank, local_rank, rank_config=rank_config, token=self.token,
                                master_port=self.master_port)

    def _reap(self) -> None:
        for r in self.ranks:
            if r.exit_code is None and _reap(r):
                self.exit_order.append(r)
                self._post_exit(r)

    def _post_exit(self, r: _Rank) -> None:
        """Tell node 0 (its server counts a rank that exits without connecting as a failure, as for its own)."""
        try:
            self.store.put(f"exit/{self.node}/{self._posted}",
                           {"rank": r.rank, "local_rank": r.local_rank, "pid": r.proc.pid, "exit_code": r.exit_code,
                            "wall_time": r.exited_at, "host": socket.gethostname()})
            self._posted += 1
            self.store.add(f"exits/{self.node}", 1)
        except RendezvousError:
            pass  # node 0 is gone: supervision notices on its next look

    def run(self) -> int:
        cfg = self.config
        try:
            _clear_stale_outputs(cfg.out_dir, list(self._spawned_ranks()))
        except OSError as error:
            raise LaunchError(f"cannot use the output folder {cfg.out_dir}: {error.strerror or error}") from None
        _raise_open_file_limit(3 * self.processes + 64)
        since_ticks = own_start_ticks()
        was_subreaper = set_child_subreaper(True)
        self._beat.start()
        lost: str | None = None
        with self.signals, self._guardian():
            try:
                self._spawn_all()
                lost = self._supervise_node()
            except BaseException:
                self._stop_ranks(signal.SIGKILL)
                raise
            finally:
                self._stop_everything(since_ticks, was_subreaper)
                self.pump.drain(2.0)
        try:
            if self.signals.received is not None:
                name = signal.Signals(self.signals.received).name
                self.store.put(f"stopped/{self.node}", {"reason": f"interrupted ({name})"})
            if lost is None:
                self._send_results()
                if self.signals.received is None:
                    return self._await_verdict()
        except RendezvousError as error:
            lost = str(error)
        finally:
            self._beat.stop()
        if self.signals.received is not None:
            self.pump.say(f"phantora: error: interrupted ({signal.Signals(self.signals.received).name}); node 0 "
                          f"({self.config.rendezvous.host}) writes the reports")
            self.pump.close()
            return 128 + self.signals.received
        self.pump.say(f"phantora: error: {lost}; node {self.node}'s ranks were stopped")
        self.pump.close()
        return 1

    def _supervise_node(self) -> str | None:
        """Until this node's ranks have ended, node 0 stopped the job, or a signal came. Returns why node 0
        cannot be reached, or None. A rank that fails here is node 0's to judge (it may have been told to stop
        by the coordinator): node 0 names the root cause and says stop."""
        next_look = 0.0
        while True:
            self.pump.poll(self.config.monitor_interval_s)
            self._reap()
            if self.signals.received is not None or self.pump.output_closed:
                return None
            if all(r.exit_code is not None for r in self.ranks):
                return None
            if self._beat.lost is not None:
                return self._beat.lost
            if time.monotonic() >= next_look:
                failing = any(r.exit_code not in (None, 0) for r in self.ranks)  # node 0 says stop in a moment
                next_look = time.monotonic() + (self.config.monitor_interval_s if failing else HEARTBEAT_S)
                try:
                    stop = self.store.take("stop")
                except RendezvousError as error:
                    return str(error)
                if stop is not None and stop["failed"]:
                    return None

    def _send_results(self) -> None:
        files, usage, tails = {}, [], {}
        for r in self.ranks:
            folder = self.config.out_dir / f"rank{r.rank}"
            for path in sorted(folder.iterdir()) if folder.is_dir() else []:
                if path.is_file() and _RESULT_PATH.fullmatch(f"rank{r.rank}/{path.name}"):
                    files[f"rank{r.rank}/{path.name}"] = base64.b64encode(path.read_bytes()).decode()
            if r.usage is not None:
                usage.append({"rank": r.rank, "peak_rss_bytes": r.usage.peak_rss_bytes, "cpu_s": r.usage.cpu_s})
            tails[str(r.rank)] = list(self.pump.stderr_tail(r.rank))
        self.store.put(f"results/{self.node}", {"files": files, "usage": usage,
                                                                    "stderr_tails": tails})

    def _await_verdict(self) -> int:
        spec = self.config.rendezvous
        verdict = _wait_for(self.store, "verdict", spec.join_timeout_s,
                            f"node 0's launcher ({spec.endpoint}) did not say how the job ended")
        self.store.add("done", 1)
        where = f"node 0 ({spec.host}) wrote the reports to {verdict['out_dir']}/"
        if verdict["exit_code"] == 0:
            self.pump.say(f"phantora: the job finished; {where}")
        else:
            self.pump.say(f"phantora: error: {verdict['error']}; {where}")
        self.pump.close()
        return verdict["exit_code"]


class _Heartbeat:
    """Beats for node 0 from a thread of its own (with its own store connection), so a launcher busy starting
    or stopping ranks is never taken for gone; notes when node 0's store cannot be reached."""

    def __init__(self, spec: RendezvousSpec, node: int) -> None:
        self._spec, self._key = spec, f"{_PREFIX}alive/{node}"
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="phantora-heartbeat", daemon=True)
        self.lost: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            store = _open_store(self._spec, host=False)
            while True:
                store.add(self._key, 1)
                if self._done.wait(HEARTBEAT_S):
                    return
        except (RuntimeError, OSError) as error:
            self.lost = (f"lost node 0's launcher (the rendezvous at {self._spec.endpoint}): "
                         f"{str(error).splitlines()[0] if str(error) else type(error).__name__}")
