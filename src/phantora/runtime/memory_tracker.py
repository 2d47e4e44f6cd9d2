"""Tells the caching-allocator model when fake CUDA storages are born and die.

A fake tensor's storage is a real `StorageImpl` (with no data); its Python object is kept alive
as long as the C++ storage lives, so a `weakref.finalize` on it fires exactly when PyTorch
would hand the block back to the caching allocator. Finalizers can run at any point (during GC,
inside the model's own code), so they only queue the free; the queue is drained before the
next allocation and before every statistics query, which keeps the model's call order the same
as a real allocator's.

Note: [Fake storage sizes]
A fake tensor's storage is a meta storage whose `nbytes()` mostly follows the real one: FSDP2
frees and re-allocates unsharded parameters with `untyped_storage().resize_(0)` / `resize_(n)`
(hooked in runtime/storage.py) and decides whether to call them by reading `storage.size()`.
Two differences are handled here. A storage that grows under an op (`Tensor.resize_`, an `out=`
argument too small) is a new block on a GPU, freed after the copy (`resize_bytes_cuda`), so those
ops' outputs are compared with the bytes allocated. And FakeTensorMode's dispatch cache builds a
view output with `set_`, which regrows a storage that `resize_(0)` emptied to fit the view; on a
GPU the storage stays empty, so it is emptied again, lest FSDP's `alloc_storage` find it already
full-size and skip the allocation.

Note: [cuBLAS workspaces]
PyTorch hands cuBLAS (and cuBLASLt, which shares it) a workspace per (handle, stream), allocated
through the caching allocator at the first GEMM and kept until `_cuda_clearCublasWorkspaces()`
(aten/src/ATen/cuda/CublasHandlePool.cpp). Handles are per thread, and a CUDA backward runs on the
autograd engine's device thread, so a training step holds two: 32 MiB each on an H100/H200
(`models.memory.cublas_workspace_bytes`). Every configuration of the accuracy benchmark had its peak
allocated memory 62-67 MiB short before they were modelled (32 MiB for the 1F1B pipelines).
"""

from __future__ import annotations

import os
import weakref

import torch

from phantora.models.memory import SimulatedOutOfMemoryError, cublas_workspace_bytes
from phantora.runtime.session import Session


class _StorageRef(weakref.ref):
    """A weak reference to a tracked storage that knows the storage's key (its StorageImpl address), for the
    callback that queues its free when the storage dies. Lighter than `weakref.finalize`, which each new
    tensor of the program paid for."""

    __slots__ = ("key",)


class MemoryTracker:
    """Maps live fake CUDA storages to allocator-model blocks."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._live: dict[int, tuple[int, int, int]] = {}
        """storage address (StorageImpl*) -> (device, allocator handle, bytes allocated)"""
        self._emptied: dict[int, int] = {}
        """storage address -> device, for tracked storages that `resize_(0)` left without a block
        (FSDP's freed unsharded parameters): still CUDA storages, to re-allocate on `resize_(n)`."""
        self._refs: dict[int, _StorageRef] = {}
        """storage address -> the weak reference that reports its death, for every tracked storage alive
        (`_live` or `_emptied`), until its free is drained."""
        self._pending_frees: list[_StorageRef] = []
        """References to tracked storages that died, in the order they died."""
        self._workspaces: dict[tuple, tuple[int, int]] = {}
        """(issuing thread, device, stream) -> (device, allocator handle) of cuBLAS workspaces."""
        self.new_storage_listeners: list = []
        """Called with the key of each new storage: state kept per storage must not outlive it
        (a new storage may reuse a dead one's address)."""

    def _sample(self, device: int) -> None:
        session = self._session
        allocator = session.allocators[device]
        session.memory_samples.append((session.now_ns(), device, allocator.allocated_bytes, allocator.reserved_bytes))

    def track_new_storage(self, tensor: torch.Tensor, stream_id: int, resized: bool = False) -> None:
        """Allocate a block for `tensor`'s storage if this storage is new; `resized`: the op may have
        grown an existing storage (`Tensor.resize_`, an `out=` argument), see Note [Fake storage sizes].
        `tensor`: a fake CUDA tensor, outside a fake kernel."""
        if self._pending_frees:
            self.drain_frees()  # first: a dead storage's address may already be reused
        storage = tensor.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is not None or key in self._emptied:
            if resized:
                nbytes = storage.nbytes()
                if nbytes > (entry[2] if entry is not None else 0):  # resize_bytes_cuda
                    self._resize(key, entry[0] if entry is not None else self._emptied[key], nbytes, stream_id)
            elif entry is None and storage.nbytes():
                torch._C.StorageBase.resize_(storage, 0)  # a view regrew it: Note [Fake storage sizes]
            return
        for listener in self.new_storage_listeners:
            listener(key)
        device = tensor._fake_device.index or 0  # FakeTensor.fake_device, without the property's call
        nbytes = storage.nbytes()
        try:
            handle = self._session.allocators[device].malloc(nbytes, stream_id)
        except SimulatedOutOfMemoryError as error:
            raise torch.cuda.OutOfMemoryError(str(error)) from None
        self._live[key] = (device, handle, nbytes)
        ref = self._refs[key] = _StorageRef(storage, self._pending_frees.append)
        ref.key = key
        self._sample(device)

    def cublas_workspace(self, thread: object, device: int, stream_id: int) -> None:
        """A cuBLAS op is about to run: PyTorch gives each handle (one per thread) a workspace on each
        stream the first time, from the caching allocator, and keeps it (Note [cuBLAS workspaces])."""
        key = (thread, device, stream_id)
        if key in self._workspaces:
            return
        self.drain_frees()
        nbytes = cublas_workspace_bytes(self._session.gpu.compute_capability, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        try:
            handle = self._session.allocators[device].malloc(nbytes, stream_id)
        except SimulatedOutOfMemoryError as error:
            raise torch.cuda.OutOfMemoryError(str(error)) from None
        self._workspaces[key] = (device, handle)
        self._sample(device)

    def clear_cublas_workspaces(self) -> None:
        """`torch._C._cuda_clearCublasWorkspaces()`: the workspaces go back to the caching allocator."""
        for device, handle in self._workspaces.values():
            self._session.allocators[device].free(handle)
            self._sample(device)
        self._workspaces.clear()

    def device_of(self, storage: torch.UntypedStorage) -> int | None:
        """The device of a tracked fake CUDA storage, None for any other storage.

        A fake tensor's storage reports the *meta* device, whatever device the tensor claims, so
        being tracked is what tells a simulated CUDA storage apart from a genuine meta one."""
        self.drain_frees()  # a dead storage's address may have been reused by an untracked one
        key = storage._cdata
        entry = self._live.get(key)
        if entry is not None:
            return entry[0]
        return self._emptied.get(key)

    def address(self, storage: torch.UntypedStorage) -> int | None:
        """The simulated device address of a tracked fake CUDA storage (its caching-allocator block; 0 once
        `resize_(0)` emptied it, as a GPU's nullptr), None for any other storage."""
        self.drain_frees()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is not None:
            return entry[1]
        return 0 if key in self._emptied else None

    def resize_storage(self, storage: torch.UntypedStorage, new_nbytes: int, stream_id: int) -> None:
        """`UntypedStorage.resize_` on a tracked fake CUDA storage (FSDP frees and re-allocates this way)."""
        self.drain_frees()
        key = storage._cdata
        entry = self._live.get(key)
        device = entry[0] if entry is not None else self._emptied.get(key)
        if device is not None:
            self._resize(key, device, new_nbytes, stream_id)

    def _resize(self, key: int, device: int, new_nbytes: int, stream_id: int) -> None:
        """Same order as `resize_bytes_cuda` (aten/src/ATen/native/cuda/Resize.cpp): resizing to 0
        drops the block; any other size allocates the new block on the current stream, copies,
        and only then frees the old one, so both are allocated for a moment."""
        allocator = self._session.allocators[device]
        old = self._live.get(key)
        if new_nbytes > 0:
            try:
                handle = allocator.malloc(new_nbytes, stream_id)
            except SimulatedOutOfMemoryError as error:
                raise torch.cuda.OutOfMemoryError(str(error)) from None
            self._live[key] = (device, handle, new_nbytes)
            self._emptied.pop(key, None)
        else:
            self._live.pop(key, None)
            self._emptied[key] = device
        if old is not None:
            allocator.free(old[1])
        self._sample(device)

    def record_stream(self, tensor: torch.Tensor, stream_id: int) -> None:
        entry = self._live.get(tensor.untyped_storage()._cdata)
        if entry is not None:
            self._session.allocators[entry[0]].record_stream(entry[1], stream_id)

    def drain_frees(self) -> None:
        pending = self._pending_frees
        while pending:
            key = pending.pop(0).key
            del self._refs[key]
            self._emptied.pop(key, None)
            entry = self._live.pop(key, None)
            if entry is not None:
                self._session.allocators[entry[0]].free(entry[1])
                self._sample(entry[0])
