"""Tells the caching-allocator model when fake CUDA storages are born and die.

A fake tensor's storage is a real `StorageImpl` (with no data); its Python object is kept alive
as long as the C++ storage lives, so a `weakref.finalize` on it fires exactly when PyTorch
would hand the block back to the caching allocator. Finalizers can run at any point (during GC,
inside the model's own code), so they only queue the free; the queue is drained before the
next allocation and before every statistics query, which keeps the model's call order the same
as a real allocator's.
"""

from __future__ import annotations

import weakref

import torch

from phantora.models.memory import SimulatedOutOfMemoryError
from phantora.runtime.session import Session


class MemoryTracker:
    """Maps live fake CUDA storages to allocator-model blocks."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._live: dict[int, tuple[int, int]] = {}
        """storage address (StorageImpl*) -> (device, allocator handle)"""
        self._pending_frees: list[int] = []
        self.new_storage_listeners: list = []
        """Called with the key of each new storage: state kept per storage must not outlive it
        (a new storage may reuse a dead one's address)."""

    def _sample(self, device: int) -> None:
        allocator = self._session.allocators[device]
        self._session.memory_samples.append((self._session.now_ns(), device, allocator.allocated_bytes, allocator.reserved_bytes))

    def track_new_storage(self, tensor: torch.Tensor, stream_id: int) -> None:
        """Allocate a block for `tensor`'s storage if this storage is new."""
        self.drain_frees()  # first: a dead storage's address may already be reused
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._live:
            return
        for listener in self.new_storage_listeners:
            listener(key)
        device = tensor.device.index or 0
        allocator = self._session.allocators[device]
        try:
            handle = allocator.malloc(storage.nbytes(), stream_id)
        except SimulatedOutOfMemoryError as error:
            raise torch.cuda.OutOfMemoryError(str(error)) from None
        self._live[key] = (device, handle)
        weakref.finalize(storage, self._pending_frees.append, key)
        self._sample(device)

    def resize_storage(self, storage: torch.UntypedStorage, new_nbytes: int, stream_id: int) -> None:
        """`UntypedStorage.resize_` on a fake CUDA storage (FSDP frees and re-allocates this way)."""
        self.drain_frees()
        key = storage._cdata
        device = storage.device.index or 0
        allocator = self._session.allocators[device]
        old = self._live.pop(key, None)
        if old is not None:
            allocator.free(old[1])
        if new_nbytes > 0:
            try:
                handle = allocator.malloc(new_nbytes, stream_id)
            except SimulatedOutOfMemoryError as error:
                raise torch.cuda.OutOfMemoryError(str(error)) from None
            self._live[key] = (device, handle)
            if old is None:
                weakref.finalize(storage, self._pending_frees.append, key)

    def record_stream(self, tensor: torch.Tensor, stream_id: int) -> None:
        entry = self._live.get(tensor.untyped_storage()._cdata)
        if entry is not None:
            self._session.allocators[entry[0]].record_stream(entry[1], stream_id)

    def drain_frees(self) -> None:
        pending = self._pending_frees
        while pending:
            entry = self._live.pop(pending.pop(0), None)
            if entry is not None:
                self._session.allocators[entry[0]].free(entry[1])
                self._sample(entry[0])
