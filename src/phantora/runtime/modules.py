"""Moving modules to the fake device keeps parameter identity (and so tied weights).

Note: [Moving modules to cuda]
`module.to("cuda")` on a real-CPU parameter yields a FakeTensor, which cannot share a
TensorImpl type with the CPU tensor, so `param.data = new` is impossible and PyTorch would put
a *new* Parameter in the module: weights tied between modules would come apart (a 1.3B GPT
counted 1.4B parameters). With `swap_module_params_on_conversion` the Parameter object keeps its
identity and takes the fake contents (`torch.utils.swap_tensors`), as it would keep its identity
on a real GPU. `swap_tensors` refuses objects with weak references because those would then
point at swapped contents; FakeTensorMode's dispatch cache puts weak references (cache-eviction
finalizers) on every fake output, which are harmless to swap, so the check skips fake tensors.
"""

from __future__ import annotations

import types
import weakref

import torch
import torch.utils
from torch._subclasses.fake_tensor import FakeTensor


def _getweakrefs_ignoring_fake(obj: object) -> list:
    return [] if isinstance(obj, FakeTensor) else weakref.getweakrefs(obj)


def install_module_conversion() -> None:
    torch.__future__.set_swap_module_params_on_conversion(True)
    view = types.SimpleNamespace(**{name: getattr(weakref, name) for name in dir(weakref) if not name.startswith("__")})
    view.getweakrefs = _getweakrefs_ignoring_fake
    torch.utils.weakref = view  # the module global swap_tensors reads


def install_foreach_support() -> None:
    """Optimizers and `clip_grad_norm_` pick their multi-tensor (foreach/fused) kernels only for
    tensor types on an allow-list, as DTensor does: fake tensors stand for plain CUDA tensors,
    so they join the list and the simulated GPU runs the kernels a real one would."""
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils

    for allowed in (optimizer._foreach_supported_types, foreach_utils._foreach_supported_types):
        if FakeTensor not in allowed:
            allowed.append(FakeTensor)
