"""Moving modules to the fake device keeps parameter identity (and so tied weights).

Note: [Moving modules to cuda]
`module.to("cuda")` on a real-CPU parameter yields a FakeTensor, which cannot share a
TensorImpl type with the CPU tensor, so `param.data = new` is impossible and PyTorch would put
a *new* Parameter in the module: weights tied between modules would come apart (a 1.3B GPT
counted 1.4B parameters). With `swap_module_params_on_conversion` the Parameter object keeps its
identity and takes the fake contents (`torch.utils.swap_tensors`), as it would keep its identity
on a real GPU. `swap_tensors` refuses objects with weak references, because those would then point
at swapped contents. Two kinds are harmless here and skipped by the check: FakeTensorMode's dispatch
cache puts weak references (cache-eviction finalizers) on every fake output; and a weak reference to
a module's parameter (DeepSpeed's `weakref.finalize`) must, as on a GPU where `Module._apply` sets
`param.data`, keep pointing at the parameter, which is what a swap in `Module._apply` gives it.

The same holds for `tensor.data = other` written by a program (FSDP moving a CPU model:
`param.data = param.to("cuda")`): PyTorch's setter would copy the fake tensor's metadata into the CPU
tensor's TensorImpl and leave a plain tensor whose storage is on the meta device; between two fake tensors
it would keep the old device, which a fake tensor holds in Python (a large model built on the host is
fake there too: Note [Hybrid dispatch]), so the setter then copies the device too. Where exactly one is
fake, the setter swaps contents instead and puts the object's own attributes back (FSDP1's FlatParameter
keeps its state in them), so the tensor keeps its identity, attributes, Parameter-ness, `requires_grad`
and, where its device allows, its gradient.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref

import torch
import torch.utils
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

_SET_DATA = torch._C.TensorBase.data.__set__
_GET_DATA = torch._C.TensorBase.data.__get__
_MODULE_APPLY = torch.nn.Module._apply.__code__


def _getweakrefs_for_swap(obj: object) -> list:
    """`weakref.getweakrefs` as `swap_tensors` sees it: fake tensors, and the tensors `Module._apply` or our
    `.data` setter swap (a parameter keeping its identity), have none that matter."""
    if isinstance(obj, FakeTensor) or _swapping_in_place(sys._getframe(2)):
        return []
    return weakref.getweakrefs(obj)


def _swapping_in_place(caller: types.FrameType | None) -> bool:
    """Whether `swap_tensors` was called by `Module._apply` or `_set_data`: swaps that stand for `.data =`."""
    return caller is not None and caller.f_code in (_MODULE_APPLY, _set_data.__code__)


def _set_data(tensor: torch.Tensor, value: torch.Tensor) -> None:
    """`tensor.data = value`; Note [Moving modules to cuda]."""
    if not isinstance(value, torch.Tensor) or isinstance(tensor, FakeTensor) == isinstance(value, FakeTensor):
        _SET_DATA(tensor, value)
        if isinstance(value, FakeTensor):  # the device a fake tensor reports is its own attribute
            tensor.fake_device = value.fake_device
        return
    own = {k: v for k, v in vars(tensor).items() if not _describes_data(k)}
    grad, tensor.grad = tensor.grad, None
    with torch.no_grad():
        if isinstance(tensor, torch.nn.Parameter):
            replacement = torch.nn.Parameter(value.detach(), requires_grad=tensor.requires_grad)
        else:
            replacement = value.detach().requires_grad_(tensor.requires_grad)
    torch.utils.swap_tensors(tensor, replacement)
    vars(tensor).update(own)  # the object's own attributes stay (FSDP's FlatParameter keeps its state there)
    if grad is not None and grad.device == tensor.device:
        tensor.grad = grad


@functools.cache
def _fake_tensor_state() -> frozenset[str]:
    """The attributes in which a fake tensor describes itself (its device, its mode, memos)."""
    with FakeTensorMode():
        return frozenset(vars(torch.empty(1)))


def _describes_data(attribute: str) -> bool:
    """Whether an attribute belongs to the data (it moves with `.data =`) rather than to the tensor object."""
    return attribute in _fake_tensor_state() or attribute.startswith("_phantora_")


def install_module_conversion() -> None:
    torch.__future__.set_swap_module_params_on_conversion(True)
    view = types.SimpleNamespace(**{name: getattr(weakref, name) for name in dir(weakref) if not name.startswith("__")})
    view.getweakrefs = _getweakrefs_for_swap
    torch.utils.weakref = view  # the module global swap_tensors reads
    torch.Tensor.data = property(_GET_DATA, _set_data, doc=torch._C.TensorBase.data.__doc__)


def install_foreach_support() -> None:
    """Optimizers and `clip_grad_norm_` pick their multi-tensor (foreach/fused) kernels only for
    tensor types on an allow-list, as DTensor does: fake tensors stand for plain CUDA tensors,
    so they join the list and the simulated GPU runs the kernels a real one would."""
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils

    for allowed in (optimizer._foreach_supported_types, foreach_utils._foreach_supported_types):
        if FakeTensor not in allowed:
            allowed.append(FakeTensor)
