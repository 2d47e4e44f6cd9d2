"""The fork server's own process (runtime/zygote.py)."""

import os

import pytest
import torch

from phantora.runtime import zygote

pytestmark = pytest.mark.every_build


def test_the_device_count_is_asked_in_a_throwaway_child(monkeypatch):
    """On a CUDA build asking torch for the device count marks every later fork as a bad fork (no rank could
    initialise CUDA): while the zygote imports, the count is the one a child got."""
    asked_by = []

    def device_count() -> int:
        asked_by.append(os.getpid())
        return 3

    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", device_count, raising=False)
    with zygote._device_count_asked_apart():
        assert torch._C._cuda_getDeviceCount() == 3
    assert asked_by == []  # only the child asked, in its own copy of this list
    assert torch._C._cuda_getDeviceCount is device_count
