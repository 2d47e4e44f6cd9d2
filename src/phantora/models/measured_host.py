"""The host model's share of host time under `--host-time measured`.

With measured host time (runtime/host_time.py Note [Measured host time]) the simulated host clock
advances by the CPU time the program's own code takes between intercepted calls. That measurement
replaces the host model's terms for Python and framework work around the ops: `framework_ns` (the
Python binding, autograd recording and statements around an op), `module_call_ns`,
`autograd_node_ns`, a tensor subclass's own dispatch (DTensor: `subclass_op_ns`; a functional collective's
result: `async_collective_op_ns`), a compiled graph's call (`compiled_call_ns`: Dynamo's guards and AOTAutograd's
wrappers run for real; the generated code does not, so its launches keep `compiled_launch_ns`), and the library
calls runtime/python_costs.py charges (optimizer step, zero_grad, clip_grad_norm_, DataLoader
batches, FSDP2 and DTensor entry points). What the measurement cannot see is the op itself
below the interception layer (on a GPU: the backend's dispatch and the kernel launch), so each op
still pays its modelled dispatch and launch: `HostModel.op_ns` as for an op the autograd engine
issues (no `framework_ns`), and syncs, queries and NCCL calls their constants. Pure.
"""

from __future__ import annotations

from phantora.models.host import HostConstants, HostModel
from phantora.models.ops import OpCall


class MeasuredHostModel(HostModel):
    """`HostModel` less the terms that measured host time replaces (they are 0)."""

    def op_ns(self, op: OpCall, *, backward: bool = False) -> int:
        return super().op_ns(op, backward=True)

    def pays_framework(self, op: OpCall, *, backward: bool = False) -> bool:
        return False

    def module_call_ns(self) -> int:
        return 0

    def autograd_node_ns(self) -> int:
        return 0

    def optimizer_step_ns(self) -> int:
        return 0

    def zero_grad_ns(self, params: int) -> int:
        return 0

    def grad_norm_ns(self) -> int:
        return 0

    def dataloader_next_ns(self) -> int:
        return 0

    def dataloader_contention_ns(self) -> int:
        return 0

    def subclass_op_ns(self, tensors: int, *, backward: bool = False) -> int:
        return 0  # a tensor subclass's (DTensor's) dispatch is Python outside the interception layer

    def async_collective_op_ns(self, outputs: int, *, mapped: bool = True) -> int:
        return 0  # Python outside the interception layer, like DTensor's

    def library_call_ns(self, name: str, *, accumulating: bool = False) -> int:
        return 0

    def compiled_call_ns(self, inputs: int) -> int:
        return 0  # Dynamo's guards and AOTAutograd's wrappers run in the process, outside the interception layer

    def library_calls(self) -> list[str]:
        return []


def host_model_for(mode: str, constants: HostConstants, scale: float = 1.0) -> HostModel:
    """The host model of a `--host-time` mode on the GPU profile's host `constants`; in "model" mode `scale`
    (`--host-time-scale`) multiplies every constant (measured mode scales the measured CPU time instead:
    runtime/host_time.py)."""
    return MeasuredHostModel(constants) if mode == "measured" else HostModel(constants.scaled(scale))
