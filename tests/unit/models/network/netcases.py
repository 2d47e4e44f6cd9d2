"""Small clusters with round numbers, so expected times can be worked out by hand."""

from __future__ import annotations

import math

from phantora.models.network import (
    ClusterNetworkConfig,
    FabricConfig,
    NcclTuning,
    NetworkSimulator,
    NicConfig,
    NvlinkConfig,
    Topology,
)
from phantora.models.network.config import PerProtocol

ZERO = PerProtocol(ll=0, ll128=0, simple=0)

IDEAL = NcclTuning(
    algorithms=("ring",),
    protocols=("Simple",),
    launch_overhead_ns=0,
    ring_base_latency_ns=ZERO,
    tree_base_latency_ns=ZERO,
    nvlink_step_latency_ns=ZERO,
    net_step_latency_ns=ZERO,
    tree_nvlink_step_latency_ns=ZERO,
    tree_net_step_latency_ns=ZERO,
    protocol_bandwidth_factor=PerProtocol(ll=1.0, ll128=1.0, simple=1.0),
    ll_bandwidth_factor_other=1.0,
    nvlink_efficiency=1.0,
    net_efficiency=1.0,
    all_to_all_efficiency=1.0,
    tree_bandwidth_factor=1.0,
    local_copy_bytes_per_s=math.inf,
)
"""No latency, no inefficiency, one protocol: pure bandwidth sharing."""


def cluster(*, nodes: int = 1, gpus_per_node: int = 4, nvlink_bytes_per_s: float = 100e9,
            nics_per_node: int = 1, nic_bytes_per_s: float = 50e9, fabric: FabricConfig | None = None,
            tuning: NcclTuning = IDEAL, nvlink_latency_ns: int = 0) -> ClusterNetworkConfig:
    return ClusterNetworkConfig(
        gpu="h200", nodes=nodes, gpus_per_node=gpus_per_node,
        nvlink=NvlinkConfig(bandwidth_bytes_per_s=nvlink_bytes_per_s, latency_ns=nvlink_latency_ns),
        nic=NicConfig(nics_per_node=nics_per_node, bandwidth_bytes_per_s=nic_bytes_per_s),
        fabric=fabric if fabric is not None else FabricConfig(kind="single_switch"),
        nccl=tuning,
    )


def simulator(**kw) -> NetworkSimulator:
    return NetworkSimulator(Topology(cluster(**kw)))
