"""The cluster as a set of directed links with capacities, and the path between any two endpoints.

Links (each one direction, capacity in bytes/s):
- `nvl_tx[g]`, `nvl_rx[g]`: GPU g's port into its node's NVSwitch. An intra-node transfer g -> h uses
  [nvl_tx[g], nvl_rx[h]]: NVSwitch is non-blocking, so only the two ports can be bottlenecks.
- `nic_tx[node, k]`, `nic_rx[node, k]`: NIC k of a node to/from its leaf switch.
- `leaf_up[leaf, s]`, `spine_down[s, leaf]`: leaf <-> spine uplink bundles, sized so that a leaf's uplinks
  carry (sum of its NIC bandwidth) / oversubscription, split evenly over the spines.

Leaves: nodes are grouped `nodes_per_leaf` at a time; with `rail_optimized`, NIC k of every node of a group
goes to that group's leaf k, otherwise all NICs of the group share one leaf. `single_switch` puts every
NIC on one leaf (no spines). An inter-node path crosses the spine only when the two NICs sit on
different leaves; which spine is ECMP's choice, a pure hash of (source NIC, destination NIC, flow label):
the same transfer always takes the same spine, whatever else was simulated before (no global counters).

`gpu_path`/`nic_path` give one path; `gpu_paths`/`nic_paths` the same paths for arrays of endpoints at once
(`PathSet`: a 1024-GPU all_to_all has a million), with numpy doing per path what the scalar forms do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phantora.models.network.config import ClusterNetworkConfig

LINK_NVL_TX = 0
LINK_NVL_RX = 1
LINK_NIC_TX = 2
LINK_NIC_RX = 3
LINK_LEAF_UP = 4
LINK_SPINE_DOWN = 5
LINK_KIND_NAMES = ("nvl_tx", "nvl_rx", "nic_tx", "nic_rx", "leaf_up", "spine_down")

_MASK64 = (1 << 64) - 1


def ecmp_hash(*values: int) -> int:
    """SplitMix64-style mixing of small non-negative integers: deterministic across runs and processes
    (unlike `hash()` of strings), and independent of anything simulated before."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h


@dataclass(frozen=True, slots=True)
class Path:
    """The links one transfer crosses, in order, and its one-way latency beyond NCCL's per-step latency."""

    link_ids: tuple[int, ...]
    latency_ns: int
    inter_node: bool


@dataclass(frozen=True, slots=True, eq=False)
class PathSet:
    """Many paths at once: every link each crosses (flattened, a link repeated once per path crossing it) and
    the longest one-way latency among the intra- and the inter-node ones."""

    link_ids: np.ndarray
    intra_latency_ns: int
    inter_latency_ns: int
    inter_node: bool
    paths: int


def _ecmp_hash_array(*values: np.ndarray) -> np.ndarray:
    """`ecmp_hash` of arrays, elementwise, in wrapping uint64 arithmetic: the same bits as the scalar form."""
    shape = np.broadcast(*values).shape
    h = np.full(shape, 0x9E3779B97F4A7C15, dtype=np.uint64)
    golden, m1, m2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    for v in values:
        h ^= np.asarray(v, dtype=np.int64).astype(np.uint64)
        h += golden
        h = (h ^ (h >> np.uint64(30))) * m1
        h = (h ^ (h >> np.uint64(27))) * m2
        h ^= h >> np.uint64(31)
    return h


class Topology:
    """Links and paths of a cluster. Immutable after construction; link ids are dense from 0."""

    def __init__(self, cluster: ClusterNetworkConfig) -> None:
        self.cluster = cluster
        self.num_nodes = cluster.nodes
        self.gpus_per_node = cluster.gpus_per_node
        self.num_gpus = cluster.num_gpus
        self.nics_per_node = cluster.nic.nics_per_node
        fab = cluster.fabric
        self._nvl_latency_ns = cluster.nvlink.latency_ns
        self._nic_latency_ns = cluster.nic.latency_ns
        self._switch_latency_ns = fab.switch_latency_ns

        kinds: list[int] = []
        caps: list[float] = []
        names: list[str] = []

        def add(kind: int, cap: float, name: str) -> int:
            kinds.append(kind)
            caps.append(cap)
            names.append(name)
            return len(kinds) - 1

        nvl = cluster.nvlink.bandwidth_bytes_per_s
        self._nvl_tx = [add(LINK_NVL_TX, nvl, f"gpu{g}.nvl_tx") for g in range(self.num_gpus)]
        self._nvl_rx = [add(LINK_NVL_RX, nvl, f"gpu{g}.nvl_rx") for g in range(self.num_gpus)]

        nic_bw = cluster.nic.bandwidth_bytes_per_s
        k_n = self.nics_per_node
        self._nic_tx = [add(LINK_NIC_TX, nic_bw, f"node{n}.nic{k}.tx") for n in range(self.num_nodes) for k in range(k_n)]
        self._nic_rx = [add(LINK_NIC_RX, nic_bw, f"node{n}.nic{k}.rx") for n in range(self.num_nodes) for k in range(k_n)]

        # Leaves and spines.
        if fab.kind == "single_switch" or self.num_nodes <= 1 or k_n == 0:
            self._nodes_per_leaf = max(self.num_nodes, 1)
            self._rails = False
        else:
            self._nodes_per_leaf = fab.nodes_per_leaf
            self._rails = fab.rail_optimized
        groups = -(-self.num_nodes // self._nodes_per_leaf)
        self.num_leaves = groups * (k_n if self._rails else 1) if k_n else 0
        self.num_spines = fab.spines if self.num_leaves > 1 else 0
        nics_on_leaf = [0] * self.num_leaves
        for n in range(self.num_nodes):
            for k in range(k_n):
                nics_on_leaf[self.leaf_of_nic(n, k)] += 1
        self._leaf_up: list[list[int]] = []
        self._spine_down: list[list[int]] = []
        for leaf in range(self.num_leaves if self.num_spines else 0):
            up_cap = nics_on_leaf[leaf] * nic_bw / fab.oversubscription / self.num_spines
            self._leaf_up.append([add(LINK_LEAF_UP, up_cap, f"leaf{leaf}.up{s}") for s in range(self.num_spines)])
        for leaf in range(self.num_leaves if self.num_spines else 0):
            up_cap = nics_on_leaf[leaf] * nic_bw / fab.oversubscription / self.num_spines
            self._spine_down.append([add(LINK_SPINE_DOWN, up_cap, f"spine{s}.down{leaf}") for s in range(self.num_spines)])

        self._nvl_tx_ids = np.asarray(self._nvl_tx, dtype=np.int64)
        self._nvl_rx_ids = np.asarray(self._nvl_rx, dtype=np.int64)
        self._nic_tx_ids = np.asarray(self._nic_tx, dtype=np.int64)
        self._nic_rx_ids = np.asarray(self._nic_rx, dtype=np.int64)
        self._leaf_up_ids = np.asarray(self._leaf_up, dtype=np.int64).reshape(len(self._leaf_up), self.num_spines)
        self._spine_down_ids = np.asarray(self._spine_down, dtype=np.int64).reshape(len(self._spine_down),
                                                                                     self.num_spines)
        self.link_kinds = np.asarray(kinds, dtype=np.int8)
        self.capacities_bytes_per_s = np.asarray(caps, dtype=np.float64)
        self.link_names = tuple(names)
        self.is_nvlink = self.link_kinds <= LINK_NVL_RX
        assert np.all(self.capacities_bytes_per_s > 0)

    @property
    def num_links(self) -> int:
        return len(self.link_names)

    # --- where things are -------------------------------------------------------------------------
    def node_of(self, gpu: int) -> int:
        self._check_gpu(gpu)
        return gpu // self.gpus_per_node

    def local_index(self, gpu: int) -> int:
        self._check_gpu(gpu)
        return gpu % self.gpus_per_node

    def nic_of(self, gpu: int) -> int:
        """Local index of the NIC a GPU uses by default."""
        if self.nics_per_node == 0:
            raise ValueError("this cluster has no NICs (single node, nics_per_node = 0)")
        return self.local_index(gpu) * self.nics_per_node // self.gpus_per_node

    def leaf_of_nic(self, node: int, nic: int) -> int:
        group = node // self._nodes_per_leaf
        return group * self.nics_per_node + nic if self._rails else group

    def _check_gpu(self, gpu: int) -> None:
        if not 0 <= gpu < self.num_gpus:
            raise ValueError(f"GPU {gpu} does not exist: the cluster has {self.num_gpus} GPUs")

    # --- paths ------------------------------------------------------------------------------------
    def gpu_path(self, src: int, dst: int, label: int = 0) -> Path:
        """Path from GPU src to GPU dst, each using its own NIC when they are on different nodes."""
        if src == dst:
            raise ValueError(f"no path from GPU {src} to itself")
        sn, dn = self.node_of(src), self.node_of(dst)
        if sn == dn:
            return Path((self._nvl_tx[src], self._nvl_rx[dst]), self._nvl_latency_ns, False)
        return self.nic_path(sn, self.nic_of(src), dn, self.nic_of(dst), label)

    def nic_path(self, src_node: int, src_nic: int, dst_node: int, dst_nic: int, label: int = 0) -> Path:
        """Path from NIC src_nic of src_node to NIC dst_nic of dst_node (GPUDirect: the GPU side is free)."""
        if src_node == dst_node:
            raise ValueError("nic_path is for inter-node transfers")
        for node, nic in ((src_node, src_nic), (dst_node, dst_nic)):
            if not (0 <= node < self.num_nodes and 0 <= nic < self.nics_per_node):
                raise ValueError(f"NIC {nic} of node {node} does not exist")
        k_n = self.nics_per_node
        links = [self._nic_tx[src_node * k_n + src_nic]]
        sl, dl = self.leaf_of_nic(src_node, src_nic), self.leaf_of_nic(dst_node, dst_nic)
        switches = 1
        if sl != dl:
            spine = ecmp_hash(src_node * k_n + src_nic, dst_node * k_n + dst_nic, label) % self.num_spines
            links.append(self._leaf_up[sl][spine])
            links.append(self._spine_down[dl][spine])
            switches = 3
        links.append(self._nic_rx[dst_node * k_n + dst_nic])
        latency = 2 * self._nic_latency_ns + switches * self._switch_latency_ns
        return Path(tuple(links), latency, True)

    # --- many paths at once -------------------------------------------------------------------------
    def gpu_paths(self, src: np.ndarray, dst: np.ndarray) -> PathSet:
        """`gpu_path(src[i], dst[i])` for every i (label 0), as one `PathSet`."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if src.size and not (0 <= min(src.min(), dst.min()) and max(src.max(), dst.max()) < self.num_gpus):
            raise ValueError(f"a GPU outside the cluster's {self.num_gpus} GPUs")
        if np.any(src == dst):
            raise ValueError("no path from a GPU to itself")
        sn, dn = src // self.gpus_per_node, dst // self.gpus_per_node
        intra = sn == dn
        links = [self._nvl_tx_ids[src[intra]], self._nvl_rx_ids[dst[intra]]]
        inter = ~intra
        if not inter.any():
            return PathSet(np.concatenate(links), self._nvl_latency_ns if intra.any() else 0, 0, False, src.size)
        if self.nics_per_node == 0:
            raise ValueError("this cluster has no NICs (single node, nics_per_node = 0)")
        k_n, gpn = self.nics_per_node, self.gpus_per_node
        nics = self.nic_paths(sn[inter], src[inter] % gpn * k_n // gpn, dn[inter], dst[inter] % gpn * k_n // gpn, 0)
        return PathSet(np.concatenate(links + [nics.link_ids]), self._nvl_latency_ns if intra.any() else 0,
                       nics.inter_latency_ns, True, src.size)

    def nic_paths(self, src_node: np.ndarray, src_nic: np.ndarray, dst_node: np.ndarray, dst_nic: np.ndarray,
                  label: np.ndarray | int) -> PathSet:
        """`nic_path(...)` for every element of the arrays, as one `PathSet`."""
        sn, sk, dn, dk = (np.asarray(a, dtype=np.int64) for a in (src_node, src_nic, dst_node, dst_nic))
        if np.any(sn == dn):
            raise ValueError("nic_path is for inter-node transfers")
        k_n = self.nics_per_node
        for node, nic in ((sn, sk), (dn, dk)):
            if node.size and not (0 <= node.min() and node.max() < self.num_nodes and 0 <= nic.min()
                                  and nic.max() < k_n):
                raise ValueError("a NIC outside the cluster")
        src_id, dst_id = sn * k_n + sk, dn * k_n + dk
        links = [self._nic_tx_ids[src_id], self._nic_rx_ids[dst_id]]
        group_s, group_d = sn // self._nodes_per_leaf, dn // self._nodes_per_leaf
        sl, dl = (group_s * k_n + sk, group_d * k_n + dk) if self._rails else (group_s, group_d)
        cross = sl != dl
        if cross.any():
            labels = np.broadcast_to(np.asarray(label, dtype=np.int64), sn.shape)[cross]
            hashes = _ecmp_hash_array(src_id[cross], dst_id[cross], labels)
            spine = (hashes % np.uint64(self.num_spines)).astype(np.int64)
            spines = self.num_spines  # flat indices: one gather each instead of a 2-D fancy index
            links += [self._leaf_up_ids.ravel()[sl[cross] * spines + spine],
                      self._spine_down_ids.ravel()[dl[cross] * spines + spine]]
        switches = 3 if cross.any() else 1
        return PathSet(np.concatenate(links), 0, 2 * self._nic_latency_ns + switches * self._switch_latency_ns,
                       bool(sn.size), sn.size)
