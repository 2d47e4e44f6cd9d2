"""Network model: cluster topology, NCCL algorithm choice, max-min fair flows, event-driven simulator.

Pure: no torch, no sockets, no clocks. See docs/network-model.md and the interface at the top of
simulator.py.
"""

from phantora.models.network.config import (
    GPU_FAMILY_DEFAULTS,
    ClusterNetworkConfig,
    FabricConfig,
    NcclTuning,
    NicConfig,
    NvlinkConfig,
    cluster_from_flags,
    cluster_from_toml,
    cluster_from_toml_dict,
)
from phantora.models.network.nccl import OPS, SIZE_CONVENTION, NcclModel, TransferPlan
from phantora.models.network.simulator import (
    CollectiveRequest,
    Completion,
    LateRequestError,
    NetworkSimulator,
)
from phantora.models.network.topology import Topology

__all__ = [
    "GPU_FAMILY_DEFAULTS", "ClusterNetworkConfig", "FabricConfig", "NcclTuning", "NicConfig", "NvlinkConfig",
    "cluster_from_flags", "cluster_from_toml", "cluster_from_toml_dict",
    "OPS", "SIZE_CONVENTION", "NcclModel", "TransferPlan",
    "CollectiveRequest", "Completion", "LateRequestError", "NetworkSimulator",
    "Topology",
]
