"""NCCL's algorithm and protocol choice, and the traffic each collective puts on the links.

For one collective (op, group, size) this module answers: which (algorithm, protocol) NCCL would pick,
and as what coflow it loads the network: its links with multiplicities, the bytes each subflow moves,
its rate cap, a fixed latency before the data moves and a fixed tail after it. The simulator then shares
link bandwidth between all coflows in flight; alone on the network a collective takes exactly
`TransferPlan.isolated_duration_ns()`.

Cost structure (after NCCL's src/graph/tuning.cc; learned, not copied):
    time = launch + base[algo][proto] + sum over steps of step_latency[hw][algo][proto]
           + bytes_per_subflow / rate + local_copy
with rate = min over links of (efficiency[kind] x capacity / multiplicity) x protocol factor, and
NCCL's step counts: all_reduce 2(n-1), all_gather/reduce_scatter n-1 (of which the inter-node ones
cost network latency), broadcast/reduce one pipelined hop, tree 2((g-1) intra + log2(nodes) inter).

Decomposition (size S, n ranks, nccl-tests size convention, see `SIZE_CONVENTION`):
- ring (all_reduce, all_gather, reduce_scatter): C channels (one per NIC the group uses per node; 1 in
  a single node). Channel c visits each node's members starting at the one on NIC c and leaves the
  node through NIC c (NCCL's NET -> GPUs -> NET rings, rail aligned). Every ring edge is a subflow
  carrying V/C with V = 2(n-1)/n S (all_reduce) or (n-1)/n S (all_gather/reduce_scatter): the chunked
  pipeline keeps all ring links busy at once, so the ring is one coflow at one rate.
- broadcast/reduce: the ring cut open at the root (n-1 edges per channel, S/C each), pipelined.
- tree (multi-node all_reduce): per channel, a chain through each node's members and NCCL's double
  binary tree across nodes, both directions (reduce up, broadcast down, pipelined), S/(2C) per tree.
- all_to_all: every ordered pair moves S/n; gather/scatter: S/n to/from the root; send_recv: S.
- barrier: an all_reduce of one 4-byte element (what c10d's barrier launches).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from phantora.models.network.config import NcclTuning, Protocol
from phantora.models.network.flows import FlowShape
from phantora.models.network.topology import PathSet, Topology

Op = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
    "all_to_all", "gather", "scatter", "send_recv", "barrier",
]
OPS: tuple[Op, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
    "all_to_all", "gather", "scatter", "send_recv", "barrier",
)
ROOTED_OPS = frozenset({"broadcast", "reduce", "gather", "scatter"})
RING_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})
"""Ops NCCL runs as ring (or tree) collectives; the others run on its point-to-point kernels ("p2p")."""

SIZE_CONVENTION = {
    "all_reduce": "the tensor (every rank's input = output)",
    "all_gather": "the gathered output (n x each rank's input)",
    "reduce_scatter": "the full input (n x each rank's output)",
    "broadcast": "the tensor",
    "reduce": "the tensor",
    "all_to_all": "each rank's whole input (it keeps S/n and sends S/n to every other rank)",
    "gather": "the root's output (n x each rank's input)",
    "scatter": "the root's input (n x each rank's output)",
    "send_recv": "the message",
    "barrier": "ignored (one 4-byte element)",
}
"""What `size_bytes` means per op: nccl-tests' convention, the same as data/h200/collectives/nccl."""

BARRIER_BYTES = 4
_MAX_CACHED_PLANS = 1 << 16


@dataclass(frozen=True, slots=True, eq=False)
class TransferPlan:
    """How one collective loads the network, for one (algorithm, protocol)."""

    algorithm: str
    protocol: Protocol
    latency_ns: int
    """Fixed time before the data moves (launch, NCCL base and per-step latency, path latency)."""
    shape: FlowShape | None
    """Links the data crosses; None when no data crosses a link (one rank, or zero bytes)."""
    bytes_per_subflow: float
    rate_cap_bytes_per_s: float
    """Per-subflow rate when alone on the network (protocol/kernel efficiency x bottleneck)."""
    tail_ns: int
    """Fixed time after the data moved (the rank's own-chunk copy/reduce in ring kernels)."""
    subflows: int = 0
    """Point-to-point transfers the coflow is made of (ring edges, tree edges, pairs): what it counts as in
    flow counts."""

    def data_duration_ns(self, rate_bytes_per_s: float) -> int:
        return transfer_ns(self.bytes_per_subflow, rate_bytes_per_s)

    def isolated_duration_ns(self) -> int:
        data = 0 if self.shape is None else self.data_duration_ns(self.rate_cap_bytes_per_s)
        return self.latency_ns + data + self.tail_ns


def transfer_ns(nbytes: float, rate_bytes_per_s: float) -> int:
    """Nanoseconds to move nbytes at a rate, rounded up (a transfer never ends early)."""
    if nbytes <= 0:
        return 0
    return int(math.ceil(nbytes * 1e9 / rate_bytes_per_s))


@dataclass(frozen=True, slots=True, eq=False)
class _Pattern:
    """A size- and protocol-independent traffic pattern: which links, how many subflows, channels."""

    shape: FlowShape
    channels: int
    bottleneck_bytes_per_s: float
    """min over links of efficiency[kind] x capacity / multiplicity."""
    intra_latency_ns: int
    inter_latency_ns: int
    inter_node: bool
    subflows: int


class NcclModel:
    """Plans collectives on one topology. Holds a cache of traffic patterns per (kind, group, root)."""

    def __init__(self, topology: Topology, tuning: NcclTuning | None = None) -> None:
        self.topology = topology
        self.tuning = tuning if tuning is not None else topology.cluster.nccl
        t = self.tuning
        self._link_efficiency = np.where(topology.is_nvlink, t.nvlink_efficiency, t.net_efficiency)
        self._patterns: dict[tuple, _Pattern] = {}
        self._plans: dict[tuple, TransferPlan] = {}
        """Plans by (op, group, size, root): a training step repeats the same calls every layer and step."""

    # --- public -----------------------------------------------------------------------------------
    def plan(self, op: Op, group: tuple[int, ...], size_bytes: int, root: int | None = None) -> TransferPlan:
        """NCCL's choice for this collective: the (algorithm, protocol) with the least isolated time. Plans
        are immutable and a pure function of the arguments, so a repeated call returns the same one."""
        key = (op, tuple(group), size_bytes, root)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _MAX_CACHED_PLANS:  # bounded: a program with ever new sizes stays small
                self._plans.clear()
            plan = self._plans[key] = self._best_plan(op, group, size_bytes, root)
        return plan

    def _best_plan(self, op: Op, group: tuple[int, ...], size_bytes: int, root: int | None) -> TransferPlan:
        self._validate(op, group, size_bytes, root)
        best: TransferPlan | None = None
        for plan in self.candidates(op, group, size_bytes, root):
            if best is None or plan.isolated_duration_ns() < best.isolated_duration_ns():
                best = plan
        assert best is not None
        return best

    def candidates(self, op: Op, group: tuple[int, ...], size_bytes: int,
                   root: int | None = None) -> list[TransferPlan]:
        """Every enabled (algorithm, protocol) plan, in a fixed order (ring before tree, LL first)."""
        self._validate(op, group, size_bytes, root)
        if op == "barrier":
            op, size_bytes = "all_reduce", BARRIER_BYTES
        t = self.tuning
        n = len(group)
        if n == 1 or size_bytes == 0:
            return [TransferPlan("ring", p, t.launch_overhead_ns, None, 0.0, math.inf, 0) for p in t.protocols[-1:]]
        out = [self._plan_ring_like(op, group, size_bytes, root, p) for p in t.protocols]
        if op == "all_reduce" and "tree" in t.algorithms and self._num_nodes(group) > 1:
            out += [self._plan_tree(group, size_bytes, p) for p in t.protocols]
        return out

    # --- validation -------------------------------------------------------------------------------
    def _validate(self, op: str, group: tuple[int, ...], size_bytes: int, root: int | None) -> None:
        if op not in OPS:
            raise ValueError(f"unknown collective {op!r}; supported: {', '.join(OPS)}")
        if not group:
            raise ValueError(f"{op}: empty group")
        if len(set(group)) != len(group):
            raise ValueError(f"{op}: group {group} lists a rank twice")
        for g in group:
            if not 0 <= g < self.topology.num_gpus:
                raise ValueError(f"{op}: rank {g} is outside the cluster's {self.topology.num_gpus} GPUs")
        if size_bytes < 0:
            raise ValueError(f"{op}: size_bytes must be >= 0, got {size_bytes}")
        if op in ROOTED_OPS:
            if root is None or root not in group:
                raise ValueError(f"{op}: root {root} must be a member of the group {group}")
        if op == "send_recv" and len(group) != 2:
            raise ValueError(f"send_recv: group must be (src, dst), got {group}")

    # --- plans ------------------------------------------------------------------------------------
    def _num_nodes(self, group: tuple[int, ...]) -> int:
        return len({self.topology.node_of(g) for g in group})

    def _bw_factor(self, op: str, protocol: Protocol, multi_node: bool) -> float:
        t = self.tuning
        if protocol == "LL" and not (multi_node or op in ("all_reduce", "reduce")):
            f = t.ll_bandwidth_factor_other
        else:
            f = t.protocol_bandwidth_factor.get(protocol)
        if op == "all_to_all":
            f *= t.all_to_all_efficiency
        return f

    def _plan_ring_like(self, op: str, group: tuple[int, ...], size_bytes: int, root: int | None,
                        protocol: Protocol) -> TransferPlan:
        t = self.tuning
        n = len(group)
        if op in ("all_reduce", "all_gather", "reduce_scatter"):
            pat = self._pattern("ring", group, None)
            nodes = self._num_nodes(group)
            factor = 2 if op == "all_reduce" else 1
            steps, inter_steps = factor * (n - 1), factor * (nodes - 1)
            volume = factor * (n - 1) / n * size_bytes
            tail_ns = transfer_ns(size_bytes / n, t.local_copy_bytes_per_s)
        elif op in ("broadcast", "reduce"):
            pat = self._pattern(op, group, root)
            steps, inter_steps = 1, (1 if pat.inter_node else 0)
            volume = float(size_bytes)
            tail_ns = 0
        else:  # all_to_all, gather, scatter, send_recv: NCCL's point-to-point kernels, one step
            if op == "send_recv":
                pat = self._pattern("p2p", group, None)
                volume = float(size_bytes)
            else:
                pat = self._pattern(op, group, root if op != "all_to_all" else None)
                volume = size_bytes / n
            steps, inter_steps = 1, (1 if pat.inter_node else 0)
            tail_ns = 0
        intra_steps = steps - inter_steps
        latency = (t.launch_overhead_ns + t.ring_base_latency_ns.get(protocol)
                   + intra_steps * (t.nvlink_step_latency_ns.get(protocol) + pat.intra_latency_ns)
                   + inter_steps * (t.net_step_latency_ns.get(protocol) + pat.inter_latency_ns))
        cap = pat.bottleneck_bytes_per_s * self._bw_factor(op, protocol, pat.inter_node)
        algorithm = "ring" if op in RING_OPS else "p2p"
        return TransferPlan(algorithm, protocol, int(round(latency)), pat.shape, volume / pat.channels, cap, tail_ns,
                            pat.subflows)

    def _plan_tree(self, group: tuple[int, ...], size_bytes: int, protocol: Protocol) -> TransferPlan:
        t = self.tuning
        pat = self._pattern("tree", group, None)
        nodes = self._num_nodes(group)
        per_node = max(self._members_by_node(group).values(), key=len)
        log_nodes = max(nodes - 1, 1).bit_length() if nodes > 1 else 0  # ceil(log2(nodes))
        latency = (t.launch_overhead_ns + t.tree_base_latency_ns.get(protocol)
                   + 2 * ((len(per_node) - 1) * (t.tree_nvlink_step_latency_ns.get(protocol) + pat.intra_latency_ns)
                          + log_nodes * (t.tree_net_step_latency_ns.get(protocol) + pat.inter_latency_ns)))
        factor = self._bw_factor("all_reduce", protocol, True)
        # NCCL rates a tree at tree_bandwidth_factor x the ring's bus bandwidth (algbw = busBw / 2); our
        # double binary tree can look faster than that for few nodes, so cap it there: the choice and
        # the time alone follow NCCL's model, the link loads follow the tree.
        ring = self._pattern("ring", group, None)
        ring_bus_bytes_per_s = ring.bottleneck_bytes_per_s * ring.channels * factor
        nccl_cap = t.tree_bandwidth_factor * ring_bus_bytes_per_s / (4 * pat.channels)
        cap = min(pat.bottleneck_bytes_per_s * factor, nccl_cap)
        tail_ns = transfer_ns(size_bytes / len(group), t.local_copy_bytes_per_s)
        return TransferPlan("tree", protocol, int(round(latency)), pat.shape,
                            size_bytes / (2 * pat.channels), cap, tail_ns, pat.subflows)

    # --- traffic patterns -------------------------------------------------------------------------
    def _members_by_node(self, group: tuple[int, ...]) -> dict[int, list[int]]:
        by: dict[int, list[int]] = {}
        for g in sorted(group):
            by.setdefault(self.topology.node_of(g), []).append(g)
        return dict(sorted(by.items()))

    def _pattern(self, kind: str, group: tuple[int, ...], root: int | None) -> _Pattern:
        key_group = group if kind in ("p2p",) else tuple(sorted(group))
        key = (kind, key_group, root)
        pat = self._patterns.get(key)
        if pat is None:
            pat = self._build_pattern(kind, group, root)
            self._patterns[key] = pat
        return pat

    def _build_pattern(self, kind: str, group: tuple[int, ...], root: int | None) -> _Pattern:
        topo = self.topology
        if kind == "p2p":
            src, dst = group
            return self._make_pattern([topo.gpu_paths(np.array([src]), np.array([dst]))], 1)
        members = np.array(sorted(group), dtype=np.int64)
        if kind == "all_to_all":
            src, dst = np.repeat(members, members.size), np.tile(members, members.size)
            pair = src != dst
            return self._make_pattern([topo.gpu_paths(src[pair], dst[pair])], 1)
        if kind in ("gather", "scatter"):
            others = members[members != root]
            to_root = (others, np.full_like(others, root))
            return self._make_pattern([topo.gpu_paths(*(to_root if kind == "gather" else to_root[::-1]))], 1)
        if kind == "tree":
            return self._tree_pattern(group)
        rings = self._rings(group)
        if kind == "ring":
            keep = [None] * len(rings)
        elif kind == "broadcast":  # the ring cut open at the root: every hop but the one into it
            keep = [ring.dst != root for ring in rings]
        elif kind == "reduce":  # data flows toward the root: every hop but the one leaving it
            keep = [ring.src != root for ring in rings]
        else:
            raise AssertionError(kind)
        return self._make_pattern([ring.paths(topo, mask) for ring, mask in zip(rings, keep)], len(rings))

    def _rings(self, group: tuple[int, ...]) -> list[_Hops]:
        """NCCL-like rings: one per channel, as its hops in ring order."""
        topo = self.topology
        by_node = self._members_by_node(group)
        nodes = list(by_node)
        if len(nodes) == 1:
            order = by_node[nodes[0]]
            ring = _Hops()
            for i, g in enumerate(order):
                ring.intra(g, order[(i + 1) % len(order)])
            return [ring]
        nics = {node: sorted({topo.nic_of(g) for g in ms}) for node, ms in by_node.items()}
        channels = min(len(v) for v in nics.values())
        rings = []
        for c in range(channels):
            segs = []
            for node in nodes:
                ms = by_node[node]
                nic = nics[node][c]
                entry = next(i for i, g in enumerate(ms) if topo.nic_of(g) == nic)
                segs.append((node, nic, ms[entry:] + ms[:entry]))
            ring = _Hops()
            for k, (node, nic, order) in enumerate(segs):
                for a, b in zip(order, order[1:]):
                    ring.intra(a, b)
                nxt_node, nxt_nic, nxt_order = segs[(k + 1) % len(segs)]
                ring.inter(order[-1], nxt_order[0], node, nic, nxt_node, nxt_nic, label=c)
            rings.append(ring)
        return rings

    def _tree_pattern(self, group: tuple[int, ...]) -> _Pattern:
        topo = self.topology
        by_node = self._members_by_node(group)
        nodes = list(by_node)
        nics = {node: sorted({topo.nic_of(g) for g in ms}) for node, ms in by_node.items()}
        channels = min(len(v) for v in nics.values())
        num = len(nodes)
        hops = _Hops()
        for c in range(channels):
            for tree in (0, 1):
                for node in nodes:  # intra-node chain from the member on NIC c, both directions
                    ms = by_node[node]
                    entry = next(i for i, g in enumerate(ms) if topo.nic_of(g) == nics[node][c])
                    order = ms[entry:] + ms[:entry]
                    for a, b in zip(order, order[1:]):
                        hops.intra(a, b)
                        hops.intra(b, a)
                # NCCL's double binary tree: tree 1 is tree 0 on the mirrored node order.
                for pos in range(1, num):
                    child, parent = pos, (pos - 1) // 2
                    if tree == 1:
                        child, parent = num - 1 - child, num - 1 - parent
                    cn, pn = nodes[child], nodes[parent]
                    label = 2 * c + tree
                    hops.inter(-1, -1, cn, nics[cn][c], pn, nics[pn][c], label)
                    hops.inter(-1, -1, pn, nics[pn][c], cn, nics[cn][c], label)
        return self._make_pattern([hops.paths(topo)], channels)

    def _make_pattern(self, paths: list[PathSet], channels: int) -> _Pattern:
        links = np.concatenate([p.link_ids for p in paths])
        counts = np.bincount(links, minlength=self.topology.num_links)
        ids = np.flatnonzero(counts).astype(np.int64)
        shape = FlowShape(ids, counts[ids].astype(np.float64))
        per_link = (self.topology.capacities_bytes_per_s[shape.link_ids]
                    * self._link_efficiency[shape.link_ids] / shape.weights)
        return _Pattern(shape, channels, float(per_link.min()), max(p.intra_latency_ns for p in paths),
                        max(p.inter_latency_ns for p in paths), any(p.inter_node for p in paths),
                        sum(p.paths for p in paths))


class _Hops:
    """The hops of a ring or tree, gathered one by one and turned into paths at once (`Topology.gpu_paths`,
    `nic_paths`). An inter-node hop leaves and enters through the channel's NICs, not the GPUs' own."""

    def __init__(self) -> None:
        self._intra: list[tuple[int, int]] = []
        self._inter: list[tuple[int, int, int, int, int, int, int]] = []

    def intra(self, src: int, dst: int) -> None:
        self._intra.append((src, dst))

    def inter(self, src: int, dst: int, src_node: int, src_nic: int, dst_node: int, dst_nic: int, label: int) -> None:
        """A hop between nodes (`src`, `dst`: the GPUs it joins in a ring; -1 where none, as in a tree)."""
        self._inter.append((src, dst, src_node, src_nic, dst_node, dst_nic, label))

    @property
    def src(self) -> np.ndarray:
        return np.array([h[0] for h in self._intra] + [h[0] for h in self._inter], dtype=np.int64)

    @property
    def dst(self) -> np.ndarray:
        return np.array([h[1] for h in self._intra] + [h[1] for h in self._inter], dtype=np.int64)

    def paths(self, topo: Topology, keep: np.ndarray | None = None) -> PathSet:
        """The hops' paths (those `keep` selects, in `src`/`dst` order) as one PathSet."""
        intra = np.array(self._intra, dtype=np.int64).reshape(-1, 2)
        inter = np.array(self._inter, dtype=np.int64).reshape(-1, 7)
        if keep is not None:
            intra, inter = intra[keep[:len(intra)]], inter[keep[len(intra):]]
        local = topo.gpu_paths(intra[:, 0], intra[:, 1])
        if not len(inter):
            return local
        net = topo.nic_paths(inter[:, 2], inter[:, 3], inter[:, 4], inter[:, 5], inter[:, 6])
        return PathSet(np.concatenate([local.link_ids, net.link_ids]), local.intra_latency_ns,
                       net.inter_latency_ns, True, local.paths + net.paths)
