"""The unit tier starts no process (tests/integration/ is for those): every way Python starts one is refused
while a unit test runs, with the test's name in the error."""

import multiprocessing.process
import os
import subprocess

import pytest


class ProcessStartedInUnitTest(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _no_processes(request, monkeypatch):
    def refuse(*args, **kwargs):
        raise ProcessStartedInUnitTest(f"{request.node.nodeid} starts a process: it belongs in tests/integration/")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)
