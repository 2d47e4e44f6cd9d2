"""Network model: cluster topology, NCCL algorithm choice, max-min fair flows, event-driven simulator.

Pure: no torch, no sockets, no clocks, no files (a GPU's defaults come from `phantora.specs`). See docs/network-model.md and the interface at the top of
simulator.py.
"""

from phantora.models.network.config import (
    ClusterNetworkConfig,
    FabricConfig,
    NcclTuning,
    NicConfig,
    NodeDefaults,
    NvlinkConfig,
    cluster_for_node,
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
    "ClusterNetworkConfig", "FabricConfig", "NcclTuning", "NicConfig", "NodeDefaults", "NvlinkConfig",
    "cluster_for_node",
    "OPS", "SIZE_CONVENTION", "NcclModel", "TransferPlan",
    "CollectiveRequest", "Completion", "LateRequestError", "NetworkSimulator",
    "Topology",
]
