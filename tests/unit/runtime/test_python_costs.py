"""Library calls charged by the path they take (runtime/python_costs.py, models/host.py)."""

import inspect
from types import SimpleNamespace

from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

from phantora.models.host import HostModel
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value
LIBRARY_CALL_NS = H200_HOST.library_call_ns
ACCUMULATING_CALL_NS = H200_HOST.accumulating_call_ns
from phantora.runtime.python_costs import _library_charge


def charge(name: str, owner) -> int:
    paid: list[int] = []
    _library_charge(HostModel(H200_HOST), name, paid.append)(owner)
    return paid[0]


def root(*reduce_grads: bool):
    states = [SimpleNamespace(_fsdp_param_groups=[SimpleNamespace(reduce_grads=r)]) for r in reduce_grads]
    return SimpleNamespace(_state_ctx=SimpleNamespace(all_states=states))


def test_fsdp_post_backward_pays_the_path_it_takes():
    name = "FSDPParamGroup.post_backward"
    assert charge(name, SimpleNamespace(reduce_grads=True)) == LIBRARY_CALL_NS[name]
    assert charge(name, SimpleNamespace(reduce_grads=False)) == ACCUMULATING_CALL_NS[name]  # sync off
    assert ACCUMULATING_CALL_NS[name] < LIBRARY_CALL_NS[name]


def test_fsdp_final_callback_is_lighter_only_when_no_group_reduced():
    name = "FSDPState._root_post_backward_final_callback"
    assert charge(name, root(False, False)) == ACCUMULATING_CALL_NS[name]
    assert charge(name, root(False, True)) == LIBRARY_CALL_NS[name]
    assert charge(name, root()) == LIBRARY_CALL_NS[name]  # nothing known: the measured path


def test_calls_with_one_path_pay_it_always():
    assert charge("FSDPParamGroup.unshard", SimpleNamespace(reduce_grads=False)) == LIBRARY_CALL_NS["FSDPParamGroup.unshard"]


def test_fsdp_still_names_what_the_path_tests_read():
    """A torch that renamed them would silently charge every call the reducing path."""
    assert "self.reduce_grads" in inspect.getsource(FSDPParamGroup)
    source = inspect.getsource(FSDPState)
    assert "_state_ctx.all_states" in source and "_fsdp_param_groups" in source
