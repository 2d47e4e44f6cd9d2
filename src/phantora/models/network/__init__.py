"""Network model: cluster topology, NCCL algorithm choice, max-min fair flows, event-driven simulator.

Pure: no torch, no sockets, no clocks, no files (a GPU's defaults come from `phantora.specs`). See docs/models/network.md and the interface at the top of
simulator.py.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "config": ("ClusterNetworkConfig", "FabricConfig", "NcclTuning", "NicConfig", "NodeDefaults", "NvlinkConfig",
               "cluster_for_node"),
    "nccl": ("OPS", "SIZE_CONVENTION", "NcclModel", "TransferPlan"),
    "simulator": ("CollectiveRequest", "Completion", "LateRequestError", "NetworkSimulator", "SimulatorCounters"),
    "topology": ("Topology",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """Load a submodule when one of its names is first asked for: a rank reads the typed NCCL tuning
    (`models.network.config`) through its GPU's profile, and must not load the simulator for it."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
