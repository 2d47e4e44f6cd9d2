"""The unit tier refuses to start processes (tests/unit/conftest.py)."""

import multiprocessing
import subprocess
import sys

import pytest


def test_a_unit_test_cannot_start_a_process():
    with pytest.raises(AssertionError, match="test_a_unit_test_cannot_start_a_process starts a process"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(AssertionError, match="belongs in tests/integration"):
        multiprocessing.Process(target=print).start()
