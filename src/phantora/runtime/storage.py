"""Fake CUDA storages behave as device memory: `resize_` frees and re-allocates it, `data_ptr` is its address.

FSDP2 releases unsharded parameters with `untyped_storage().resize_(0)` and brings them back
with `resize_(n)`; that path does not go through the dispatcher, so it is hooked here. The
storage of a fake CUDA tensor reports the *meta* device (the fake tensor wraps a meta tensor),
so the hook asks the memory tracker whether the storage is one of its simulated CUDA storages
rather than looking at `storage.device`.

Note: [Addresses of fake tensors]
A fake tensor's storage is a meta storage, whose `data_ptr()` is 0 for every tensor. Programs key
tensors by address: Accelerate's FSDP2 maps optimizer parameters by `data_ptr()`, and with every address
0 all 53 parameters of a Llama became the embedding's shard and the simulated step ran 3.5x too long. So
`data_ptr()` of a fake CUDA tensor (and of its storage) is its block's address in the caching-allocator
model, plus the tensor's offset: distinct for live tensors, shared by views, reused after a free, as on
a GPU. A fake tensor on the host (a large CPU factory kept fake) takes its StorageImpl's host address.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

from phantora.runtime.dispatch import KernelRecorder


def install_storage_resize_hook(recorder: KernelRecorder) -> None:
    original = torch.UntypedStorage.resize_

    def resize_(self: torch.UntypedStorage, size: int):
        if self.device.type in ("meta", "cuda"):
            device = recorder.memory.device_of(self)
            if device is not None:
                recorder.memory.resize_storage(self, int(size), recorder.current_stream_id(device))
        return original(self, size)

    torch.UntypedStorage.resize_ = resize_


def install_addresses(recorder: KernelRecorder) -> None:
    """Note [Addresses of fake tensors]."""
    storage_data_ptr = torch.UntypedStorage.data_ptr
    memory = recorder.memory

    def data_ptr_of_storage(self: torch.UntypedStorage) -> int:
        if self.device.type == "meta":
            address = memory.address(self)
            if address is not None:
                return address
        return storage_data_ptr(self)

    def data_ptr_of_tensor(self: FakeTensor) -> int:
        storage = self.untyped_storage()
        address = memory.address(storage)
        if address is None:
            address = storage._cdata
        return address + self.storage_offset() * self.element_size() if address else 0

    torch.UntypedStorage.data_ptr = data_ptr_of_storage
    FakeTensor.data_ptr = data_ptr_of_tensor
