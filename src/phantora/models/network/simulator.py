"""The event-driven network simulator: collectives and transfers in, completion times out.

Interface (what the coordinator calls)
--------------------------------------
    net = NetworkSimulator(Topology(cluster))  # cluster: a ClusterNetworkConfig (phantora.specs.cluster builds one)
    net.submit(CollectiveRequest(op="all_reduce", group=(0, 1, 2, 3), size_bytes=64 << 20,
                                 start_ns=t, key=("pg3", 17)))
    net.submit_p2p(src=0, dst=8, size_bytes=1 << 20, start_ns=t, key=("pp", 4))
    done = net.advance_to(safe_ns)        # -> [Completion(key, op, start_ns, end_ns, algorithm, protocol)]
    done = net.run_until_next_completion()  # when every rank is blocked on the network
    done = net.run_until_idle()             # drain at the end
    net.next_event_ns()                     # earliest internal event (None when idle)
    net.speculate()                         # tentative completions of everything in flight; no side effects

- `group` lists global ranks (= GPU ids) in the process group's rank order; `root` is a global rank.
- `start_ns` is when the collective can start on every member: the coordinator computes it (the last
  member's stream reaching the collective). The simulator knows nothing of streams.
- `size_bytes` follows nccl-tests' convention per op (`nccl.SIZE_CONVENTION`).
- `key` identifies the request in its completion: an int, a str, or a tuple of those (e.g. (group id,
  sequence number)). (start_ns, key) must be unique among requests in flight.

Note: [Late events: conservative safe time]
The coordinator may learn of a transfer late (a slow rank reports it after others have moved on). The
simulator never computes past a time the caller has not declared safe, so it never has to undo work:
- `advance_to(safe_ns)` is the caller's promise that no request with `start_ns < safe_ns` will be
  submitted afterwards. The simulator processes every event up to `safe_ns`, returns the completions
  that happened by then (these are final: nothing submitted later can start before them) and sets
  `now_ns = safe_ns`.
- `run_until_next_completion()` is the promise for the blocked case: "nothing will start before the next
  completion" (true when every rank waits on the network); `now_ns` becomes that completion's time.
- A request with `start_ns < now_ns` breaks the promise and raises `LateRequestError` - unless it touches
  no link before `now_ns` (its fixed latency carries its first event past `now_ns`), in which case it is
  still simulated exactly.
- Between two promises, requests may arrive in any order; they wait in a queue ordered canonically by
  (time, start_ns, key). `speculate()` looks ahead on a copy of the state, never on the state itself.
So the result is a pure function of the *set* of requests: bit-identical whatever order they were
submitted in and however the caller interleaved its `advance_to` calls
(tests/unit/network/test_network_simulator.py checks this with seeded random permutations).

Note: [Determinism]
State changes only at event instants (arrivals, data completions, tails), never at the caller's safe
times, so the floating-point history of every flow is the same whatever the caller's call pattern.
Flows get ids from a per-simulator counter in canonical order as they start; ties are broken by
(time, kind, start_ns, key) and by flow id; no dict or set iteration order reaches a result.

Note: [Compute beside NCCL]
NCCL moves data with kernels that share their GPUs' SMs and memory with the compute kernels around
them, and slow down beside them (models/interference.py). The coordinator reports when each GPU runs
compute (`mark_compute`, at the current safe time, when it places a kernel); while any member GPU of
an operation runs compute, its flows move at their max-min fair rate divided by `busy_slowdown`.
Busy periods change rates only at event instants (a GPU becoming busy at the safe time, or its
`_GPU_IDLE` timer), so the result stays a pure function of the requests and the busy periods.

Note: [Event loop]
A request waits its plan's fixed latency, then becomes a *flow* (one coflow, see flows.py) that shares
link bandwidth max-min fairly with every other flow in flight, then waits its fixed tail. When flows
start or end at an instant, only the flows connected to them through shared links (transitively) get
new rates (flows.py: Note [Bit-exact progressive filling] explains why that gives the same bits as a
global recomputation); each flow's remaining bytes are brought up to date lazily when its rate changes.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from phantora.models.interference import NO_SHARING, GpuSharing
from phantora.models.network.flows import FlowShape, max_min_rates
from phantora.models.network.nccl import NcclModel, Op, TransferPlan
from phantora.models.network.topology import Topology

Key = Union[int, str, tuple["Key", ...]]

_ARRIVE = 0  # the data phase starts
_FINISH = 1  # the tail is over: the request completes
_GPU_IDLE = 2  # a GPU's compute ends (Note [Compute beside NCCL])


class LateRequestError(ValueError):
    """A request started before the time the caller already declared safe."""


@dataclass(frozen=True, slots=True)
class CollectiveRequest:
    op: Op
    group: tuple[int, ...]
    """Global ranks (GPU ids) in the group's rank order."""
    size_bytes: int
    """nccl-tests convention per op, see nccl.SIZE_CONVENTION."""
    start_ns: int
    key: Key
    root: int | None = None
    """Global rank of the root for broadcast, reduce, gather, scatter."""


@dataclass(frozen=True, slots=True)
class Completion:
    key: Key
    op: str
    start_ns: int
    end_ns: int
    algorithm: str
    protocol: str

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def _order_key(key: Key) -> tuple:
    """A total order over int/str/tuple keys (Python cannot compare 1 with "a")."""
    if isinstance(key, bool):
        raise TypeError(f"request key must be an int, a str or a tuple of those, got {key!r}")
    if isinstance(key, int):
        return (0, key)
    if isinstance(key, str):
        return (1, key)
    if isinstance(key, tuple):
        return (2, tuple(_order_key(k) for k in key))
    raise TypeError(f"request key must be an int, a str or a tuple of those, got {type(key).__name__}")


@dataclass(slots=True)
class SimulatorCounters:
    """How much work the simulation took: event instants, coflows, and the most in flight at once."""

    instants: int = 0
    """Instants processed (each may start and finish many flows)."""
    flows: int = 0
    """Coflows started."""
    peak_flows: int = 0
    """Most coflows in flight at once."""
    subflows_in_flight: int = 0
    peak_subflows: int = 0
    """Most point-to-point transfers (ring edges, pairs) in flight at once, over all coflows."""

    def flow_started(self, in_flight: int, subflows: int) -> None:
        self.flows += 1
        self.peak_flows = max(self.peak_flows, in_flight)
        self.subflows_in_flight += subflows
        self.peak_subflows = max(self.peak_subflows, self.subflows_in_flight)

    def flow_finished(self, subflows: int) -> None:
        self.subflows_in_flight -= subflows


@dataclass(slots=True)
class _Request:
    req: CollectiveRequest
    order: tuple
    plan: TransferPlan


@dataclass(slots=True)
class _Flow:
    fid: int
    request: _Request
    shape: FlowShape
    cap_bytes_per_s: float
    remaining_bytes: float
    rate_bytes_per_s: float
    updated_ns: int
    finish_ns: int
    version: int

    def clone(self) -> "_Flow":
        return _Flow(self.fid, self.request, self.shape, self.cap_bytes_per_s, self.remaining_bytes,
                     self.rate_bytes_per_s, self.updated_ns, self.finish_ns, self.version)


class NetworkSimulator:
    """Event-driven flow-level simulator of one cluster's network. See the module docstring."""

    def __init__(self, topology: Topology, nccl: NcclModel | None = None, *, sharing: GpuSharing = NO_SHARING,
                 compute_of: Callable[[int], int] | None = None) -> None:
        self.topology = topology
        self.compute_of = compute_of
        """None, or the GPU whose compute stands for GPU g's: only those report compute (the coordinator's
        representative ranks, protocol/symmetry.py)."""
        self._computing_gpus: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.sharing = sharing
        """How much compute on a member GPU slows an operation (its `nccl_slowdown`, by operation)."""
        self.busy_slowdown = sharing.nccl_slowdown
        self.busy_slowdown_by_op = sharing.nccl_factors()
        """Operations ("all_gather", ...) whose slowdown beside compute differs from `busy_slowdown`."""
        self._slows_beside_compute = self.busy_slowdown != 1.0 or any(v != 1.0 for v in self.busy_slowdown_by_op.values())
        self._busy_until: dict[int, int] = {}
        """GPUs running compute, and until when (Note [Compute beside NCCL])."""
        self.nccl = nccl if nccl is not None else NcclModel(topology)
        self._capacities = topology.capacities_bytes_per_s
        self._now_ns = 0
        """Caller-declared safe time: nothing may start before it."""
        self._last_event_ns = 0
        self._timers: list[tuple[int, int, int, tuple, _Request]] = []
        self._flow_heap: list[tuple[int, int, int]] = []
        self._flows: dict[int, _Flow] = {}
        self._link_users: dict[int, set[int]] = {}
        self._in_flight: dict[tuple[int, tuple], _Request] = {}
        self._done: list[tuple[int, tuple, Completion]] = []
        self._next_fid = 0
        self._counters = SimulatorCounters()

    # --- submitting -------------------------------------------------------------------------------
    @property
    def now_ns(self) -> int:
        return self._now_ns

    def submit(self, request: CollectiveRequest) -> None:
        """Queue one collective (or send_recv). Raises ValueError for malformed requests and
        LateRequestError when it starts before `now_ns` and would touch the network before it."""
        if not isinstance(request.start_ns, int) or request.start_ns < 0:
            raise ValueError(f"start_ns must be a non-negative integer of nanoseconds, got {request.start_ns!r}")
        if not isinstance(request.size_bytes, int):
            raise ValueError(f"size_bytes must be an integer, got {request.size_bytes!r}")
        order = _order_key(request.key)
        ident = (request.start_ns, order)
        if ident in self._in_flight:
            raise ValueError(f"a request with key {request.key!r} and start {request.start_ns} ns is already in flight")
        group = tuple(int(g) for g in request.group)
        plan = self.nccl.plan(request.op, group, request.size_bytes, request.root)
        first_event_ns = request.start_ns + plan.latency_ns
        if plan.shape is None:
            first_event_ns += plan.tail_ns
        if first_event_ns < self._now_ns:
            raise LateRequestError(
                f"request {request.key!r} starts at {request.start_ns} ns, before the declared safe time "
                f"{self._now_ns} ns: the caller promised no request would start before it")
        r = _Request(request, order, plan)
        self._in_flight[ident] = r
        if plan.shape is None:
            self._push_timer(first_event_ns, _FINISH, r)
        else:
            self._push_timer(request.start_ns + plan.latency_ns, _ARRIVE, r)

    def submit_p2p(self, *, src: int, dst: int, size_bytes: int, start_ns: int, key: Key) -> None:
        """A matched send/recv pair: `start_ns` is when both sides have reached it."""
        self.submit(CollectiveRequest("send_recv", (src, dst), size_bytes, start_ns, key))

    def mark_compute(self, gpu: int, start_ns: int, end_ns: int) -> None:
        """GPU `gpu` runs compute from `start_ns` (the current safe time) to `end_ns`."""
        if start_ns != self._now_ns:
            raise LateRequestError(f"compute on GPU {gpu} reported from {start_ns} ns; it must start at the "
                                   f"safe time {self._now_ns} ns")
        until = self._busy_until.get(gpu)
        if end_ns <= start_ns or (until is not None and until >= end_ns):
            return
        self._busy_until[gpu] = end_ns
        if until is None:  # the GPU was idle
            self._push_idle_timer(gpu, end_ns)
            if self._slows_beside_compute:
                self._reallocate_gpu(start_ns, gpu)

    def _push_idle_timer(self, gpu: int, t: int) -> None:
        """Each busy GPU has exactly one pending idle timer: extending a busy period moves none, the
        timer moves itself to the period's end when it fires early."""
        heapq.heappush(self._timers, (t, _GPU_IDLE, gpu, (), None))

    # --- advancing --------------------------------------------------------------------------------
    def advance_to(self, safe_ns: int) -> list[Completion]:
        """Process every event up to `safe_ns` (the caller's promise: nothing more starts before it)
        and return the completions with `end_ns <= safe_ns`, ordered by (end_ns, key)."""
        if safe_ns < self._now_ns:
            raise ValueError(f"advance_to({safe_ns}) goes back in time: already at {self._now_ns} ns")
        while (t := self.next_event_ns()) is not None and t <= safe_ns:
            self._process_instant(t)
        self._now_ns = safe_ns
        return self._take_done(safe_ns)

    def run_until_next_completion(self) -> list[Completion]:
        """Process events until some request completes; return everything that completes at that
        instant. The caller promises that nothing will start before it (every rank is blocked)."""
        while not self._done and (t := self.next_event_ns()) is not None:
            self._process_instant(t)
        if not self._done:
            return []
        t = min(end for end, _, _ in self._done)
        self._now_ns = max(self._now_ns, t)
        return self._take_done(t)

    def run_until_idle(self) -> list[Completion]:
        """Process everything in flight; the caller promises nothing will start before the last completion."""
        while (t := self.next_event_ns()) is not None:
            self._process_instant(t)
        self._now_ns = max(self._now_ns, self._last_event_ns)
        return self._take_done(self._now_ns)

    def next_event_ns(self) -> int | None:
        """Time of the next internal event given the requests known now (None when idle)."""
        heap = self._flow_heap
        while heap:  # drop entries made stale by a rate change
            _, fid, version = heap[0]
            f = self._flows.get(fid)
            if f is not None and f.version == version:
                break
            heapq.heappop(heap)
        times = []
        if heap:
            times.append(heap[0][0])
        if self._timers:
            times.append(self._timers[0][0])
        return min(times) if times else None

    def speculate(self) -> list[Completion]:
        """Tentative completions of every request in flight if nothing else were submitted.
        Leaves the simulator untouched (runs on a copy)."""
        return self._clone().run_until_idle()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def counters(self) -> "SimulatorCounters":
        """What the simulator has done so far (a copy): for benchmarks and reports, never for results."""
        return dataclasses.replace(self._counters)

    # --- internals --------------------------------------------------------------------------------
    def _push_timer(self, t: int, kind: int, r: _Request) -> None:
        heapq.heappush(self._timers, (t, kind, r.req.start_ns, r.order, r))

    def _take_done(self, up_to_ns: int) -> list[Completion]:
        ready = sorted((e for e in self._done if e[0] <= up_to_ns), key=lambda e: (e[0], e[1]))
        self._done = [e for e in self._done if e[0] > up_to_ns]
        return [c for _, _, c in ready]

    def _complete(self, r: _Request, t: int) -> None:
        del self._in_flight[(r.req.start_ns, r.order)]
        c = Completion(r.req.key, r.req.op, r.req.start_ns, t, r.plan.algorithm, r.plan.protocol)
        self._done.append((t, (r.req.start_ns, r.order), c))

    def _process_instant(self, t: int) -> None:
        """Everything that happens at time t, in canonical order."""
        assert t >= self._last_event_ns
        self._last_event_ns = t
        self._counters.instants += 1
        changed_links: list[np.ndarray] = []
        # 1. Flows whose data is all sent.
        finished: list[_Flow] = []
        heap = self._flow_heap
        while heap and heap[0][0] == t:
            _, fid, version = heapq.heappop(heap)
            f = self._flows.get(fid)
            if f is not None and f.version == version:
                finished.append(f)
        for f in sorted(finished, key=lambda f: f.fid):
            del self._flows[f.fid]
            self._counters.flow_finished(f.request.plan.subflows)
            for link in f.shape.link_ids.tolist():
                users = self._link_users[link]
                users.discard(f.fid)
                if not users:
                    del self._link_users[link]
            changed_links.append(f.shape.link_ids)
            if f.request.plan.tail_ns:
                self._push_timer(t + f.request.plan.tail_ns, _FINISH, f.request)
            else:
                self._complete(f.request, t)
        # 2. Timers due now: data phases starting, tails ending (heap order is canonical).
        arrivals: list[_Flow] = []
        while self._timers and self._timers[0][0] == t:
            _, kind, gpu, _, r = heapq.heappop(self._timers)
            if kind == _GPU_IDLE:
                until = self._busy_until[gpu]
                if until > t:  # extended since the timer was set: it moves to the new end
                    self._push_idle_timer(gpu, until)
                else:
                    del self._busy_until[gpu]
                    changed_links.extend(f.shape.link_ids for f in self._flows_on(gpu))
                continue
            if kind == _FINISH:
                self._complete(r, t)
                continue
            plan = r.plan
            assert plan.shape is not None
            f = _Flow(self._next_fid, r, plan.shape, plan.rate_cap_bytes_per_s, plan.bytes_per_subflow,
                      0.0, t, t, 0)
            self._next_fid += 1
            self._counters.flow_started(len(self._flows) + 1, plan.subflows)
            self._flows[f.fid] = f
            for link in f.shape.link_ids.tolist():
                self._link_users.setdefault(link, set()).add(f.fid)
            changed_links.append(f.shape.link_ids)
            arrivals.append(f)
        # 3. New rates for the flows that share links (transitively) with the ones that changed.
        if changed_links:
            self._reallocate(t, np.unique(np.concatenate(changed_links)))

    def _flows_on(self, gpu: int) -> list[_Flow]:
        return [f for f in self._flows.values() if gpu in self._reporting_gpus(f.request.req.group)]

    def _reporting_gpus(self, group: tuple[int, ...]) -> tuple[int, ...]:
        """The GPUs whose compute periods stand for the group's (itself, or its members' `compute_of`)."""
        if self.compute_of is None:
            return group
        gpus = self._computing_gpus.get(group)
        if gpus is None:
            gpus = self._computing_gpus[group] = tuple(sorted({self.compute_of(g) for g in group}))
        return gpus

    def _reallocate_gpu(self, t: int, gpu: int) -> None:
        flows = self._flows_on(gpu)
        if flows:
            self._reallocate(t, np.unique(np.concatenate([f.shape.link_ids for f in flows])))

    def _busy_factor(self, f: _Flow, t: int) -> float:
        """1 / the operation's slowdown while a member GPU of the flow's operation runs compute, else 1."""
        busy = self._busy_until
        req = f.request.req
        if busy and any(busy.get(g, 0) > t for g in self._reporting_gpus(req.group)):
            return 1.0 / self.busy_slowdown_by_op.get(req.op, self.busy_slowdown)
        return 1.0

    def _affected_flows(self, seed_links: np.ndarray) -> list[_Flow]:
        """The flows connected to `seed_links` through shared links, transitively, in flow-id order: a
        breadth-first search whose per-link work is a C-level set union and whose per-flow work is one numpy
        mask of the flow's links (a flow's links can number thousands in a 1024-GPU ring)."""
        link_users = self._link_users
        seen_links = np.zeros(self._capacities.size, dtype=bool)
        frontier = seed_links
        seen_links[frontier] = True
        found: set[int] = set()
        while frontier.size:
            users = [link_users[link] for link in frontier.tolist() if link in link_users]
            new = set().union(*users) - found if users else set()
            if not new:
                break
            found |= new
            links = np.concatenate([self._flows[fid].shape.link_ids for fid in new])
            frontier = np.unique(links[~seen_links[links]])
            seen_links[frontier] = True
        return [self._flows[fid] for fid in sorted(found)]

    def _reallocate(self, t: int, seed_links: np.ndarray) -> None:
        """New rates at `t` for the flows connected to `seed_links`. The arithmetic is elementwise numpy on the
        same float64 operations, in the same order, as one flow at a time would do (bit-identical): remaining
        bytes brought up to `t`, then the finish time rounded up as `transfer_ns` does."""
        flows = self._affected_flows(seed_links)
        if not flows:
            return
        n = len(flows)
        updated = np.fromiter((f.updated_ns for f in flows), dtype=np.int64, count=n)
        old_rate = np.fromiter((f.rate_bytes_per_s for f in flows), dtype=np.float64, count=n)
        remaining = np.fromiter((f.remaining_bytes for f in flows), dtype=np.float64, count=n)
        remaining = np.where(updated != t, remaining - old_rate * (t - updated) / 1e9, remaining)
        caps = np.fromiter((f.cap_bytes_per_s for f in flows), dtype=np.float64, count=n)
        rates = max_min_rates(self._capacities, [f.shape for f in flows], caps)
        if self._slows_beside_compute:
            rates = rates * np.fromiter((self._busy_factor(f, t) for f in flows), dtype=np.float64, count=n)
        with np.errstate(divide="ignore", invalid="ignore"):
            data_ns = np.where(remaining > 0, np.ceil(remaining * 1e9 / rates), 0.0)
        finish = t + np.maximum(data_ns, 1.0).astype(np.int64)
        heap = self._flow_heap
        for f, left, rate, end in zip(flows, remaining.tolist(), rates.tolist(), finish.tolist()):
            f.remaining_bytes = left
            f.updated_ns = t
            f.rate_bytes_per_s = rate
            if end != f.finish_ns or f.version == 0:  # else its heap entry still holds: no stale entry to pop later
                f.finish_ns = end
                f.version += 1
                heapq.heappush(heap, (end, f.fid, f.version))

    def _clone(self) -> "NetworkSimulator":
        other = NetworkSimulator.__new__(NetworkSimulator)
        other.topology = self.topology
        other.nccl = self.nccl
        other.sharing = self.sharing
        other.busy_slowdown = self.busy_slowdown
        other.busy_slowdown_by_op = self.busy_slowdown_by_op
        other._slows_beside_compute = self._slows_beside_compute
        other.compute_of = self.compute_of
        other._computing_gpus = self._computing_gpus
        other._busy_until = dict(self._busy_until)
        other._capacities = self._capacities
        other._now_ns = self._now_ns
        other._last_event_ns = self._last_event_ns
        other._timers = list(self._timers)
        other._flow_heap = list(self._flow_heap)
        other._flows = {fid: f.clone() for fid, f in self._flows.items()}
        other._link_users = {link: set(u) for link, u in self._link_users.items()}
        other._in_flight = dict(self._in_flight)
        other._done = list(self._done)
        other._next_fid = self._next_fid
        other._counters = dataclasses.replace(self._counters)
        return other
