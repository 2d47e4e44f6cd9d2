"""`UntypedStorage.resize_` on fake CUDA storages frees and re-allocates device memory.

FSDP2 releases unsharded parameters with `untyped_storage().resize_(0)` and brings them back
with `resize_(n)`; that path does not go through the dispatcher, so it is hooked here. The
storage of a fake CUDA tensor reports the *meta* device (the fake tensor wraps a meta tensor),
so the hook asks the memory tracker whether the storage is one of its simulated CUDA storages
rather than looking at `storage.device`.
"""

from __future__ import annotations

import torch

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
