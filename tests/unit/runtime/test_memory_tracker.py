"""The rank runtime's memory tracker: fake CUDA storages <-> caching-allocator model blocks."""

from types import SimpleNamespace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from phantora.models.memory import CachingAllocatorModel
from phantora.runtime.dispatch import resizes_outputs
from phantora.runtime.memory_tracker import MemoryTracker
from phantora.runtime.storage import install_storage_resize_hook

MIB = 1 << 20


@pytest.fixture
def tracker():
    """A tracker on one simulated 80 GiB device, with the `UntypedStorage.resize_` hook installed."""
    session = SimpleNamespace(allocators=[CachingAllocatorModel(80 << 30, 512 * MIB)], memory_samples=[],
                              now_ns=lambda: 0)
    memory = MemoryTracker(session)
    original = torch.UntypedStorage.resize_
    install_storage_resize_hook(SimpleNamespace(memory=memory, current_stream_id=lambda device: 0))
    try:
        yield memory
    finally:
        torch.UntypedStorage.resize_ = original


def _allocated(memory: MemoryTracker) -> int:
    memory.drain_frees()
    return memory._session.allocators[0].allocated_bytes


def test_storage_resize_frees_and_reallocates_like_fsdp2(tracker):
    """FSDP2's free_storage / alloc_storage (`untyped_storage().resize_(0)` / `resize_(n)`) on a fake
    tensor: its storage reports the meta device, yet it is a simulated CUDA block."""
    with FakeTensorMode():
        unsharded = torch.empty(MIB, dtype=torch.bfloat16)
    assert unsharded.untyped_storage().device.type == "meta"
    tracker.track_new_storage(unsharded, 0)
    assert _allocated(tracker) == 2 * MIB

    unsharded.untyped_storage().resize_(0)                  # reshard after forward
    assert _allocated(tracker) == 0
    for _ in range(2):  # the second view comes from FakeTensorMode's cache, which regrows the storage
        tracker.track_new_storage(unsharded.view(-1), 0)    # a view of the emptied storage allocates nothing
        assert _allocated(tracker) == 0
        assert unsharded.untyped_storage().nbytes() == 0    # and leaves it empty, as FSDP's alloc_storage expects

    unsharded.untyped_storage().resize_(2 * MIB)            # unshard again
    assert _allocated(tracker) == 2 * MIB
    assert tracker._session.memory_samples[-1][2] == 2 * MIB  # the memory time series sees resizes

    del unsharded                                           # the storage dies: its block is freed once
    assert _allocated(tracker) == 0


def test_resize_to_a_new_size_holds_both_blocks_for_a_moment(tracker):
    """resize_bytes_cuda allocates the new block and copies before the old one is freed."""
    with FakeTensorMode():
        t = torch.empty(4 * MIB, dtype=torch.uint8)
    tracker.track_new_storage(t, 0)
    allocator = tracker._session.allocators[0]
    allocator.reset_peak_stats()
    t.untyped_storage().resize_(6 * MIB)
    assert _allocated(tracker) == 6 * MIB
    assert allocator.peak_allocated_bytes == 10 * MIB


def test_tensor_resize_that_grows_the_storage_reallocates(tracker):
    """`Tensor.resize_` and `out=` arguments grow a too-small storage (resize_bytes_cuda); the op's
    output is the same storage, now bigger."""
    with FakeTensorMode():
        out = torch.empty(0)
        tracker.track_new_storage(out, 0)
        assert _allocated(tracker) == 0
        out.resize_(MIB)                                    # float32: 4 MiB
        assert resizes_outputs(torch.ops.aten.resize_.default) and resizes_outputs(torch.ops.aten.mm.out)
        tracker.track_new_storage(out, 0, resized=True)     # what the recorder does with such an op's outputs
        assert _allocated(tracker) == 4 * MIB
        out.resize_(16)                                     # shrinking keeps the storage
        tracker.track_new_storage(out, 0, resized=True)
        assert _allocated(tracker) == 4 * MIB


def test_resize_of_an_untracked_storage_is_ignored(tracker):
    meta = torch.empty(MIB, device="meta")                  # a genuine meta tensor (model built on meta)
    meta.untyped_storage().resize_(0)
    cpu = torch.empty(16)
    cpu.untyped_storage().resize_(128)
    assert cpu.untyped_storage().nbytes() == 128
    assert _allocated(tracker) == 0


def test_a_storage_that_dies_emptied_is_forgotten(tracker):
    """A storage FSDP left empty (`resize_(0)`) and then dropped: nothing of it stays tracked, so a new storage at its
    address starts afresh."""
    with FakeTensorMode():
        unsharded = torch.empty(MIB, dtype=torch.bfloat16)
    tracker.track_new_storage(unsharded, 0)
    unsharded.untyped_storage().resize_(0)
    assert tracker.device_of(unsharded.untyped_storage()) == 0 and _allocated(tracker) == 0
    del unsharded
    tracker.drain_frees()
    assert not tracker._emptied and not tracker._live and not tracker._pending_frees
