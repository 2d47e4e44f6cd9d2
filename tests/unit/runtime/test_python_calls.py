"""The native counter of the program's Python calls (runtime/python_calls.py, csrc/python_calls.cpp)."""

import importlib.util
import sys
import threading

import pytest

from phantora.runtime.native import build_shim
from phantora.runtime.python_calls import PythonCalls

PROGRAM = """
def leaf():
    pass

def calls(n):
    for _ in range(n):
        leaf()
"""
LIBRARY = """
import program

def library_call(n):
    program.calls(n)

def own_helper():
    return library_call(3)
"""


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def modules(tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "library.py").write_text(LIBRARY)
    program = _load(tmp_path / "program.py")
    library = _load(tmp_path / "library" / "library.py")
    counter = PythonCalls(str(build_shim()), [str(tmp_path / "library") + "/"])
    yield counter, program, library
    counter.stop_on_this_thread()
    sys.modules.pop("program", None)
    sys.modules.pop("library", None)


def counted(counter, fn):
    counter.count_on_this_thread()
    before = counter.calls()
    fn()
    after = counter.calls()
    counter.stop_on_this_thread()
    return after - before


def test_counts_the_programs_calls(modules):
    counter, program, _ = modules
    assert counted(counter, lambda: program.calls(10)) == 1 + 1 + 10  # the lambda, calls, ten leaves


def test_outside_code_and_what_it_calls_are_not_counted(modules):
    counter, _, library = modules
    # the lambda only: library_call is outside, and the program's functions it calls are its cost
    assert counted(counter, lambda: library.library_call(10)) == 1
    # again after an exception left the outside frame (its return still ends the exclusion)
    assert counted(counter, lambda: _raise_through(library)) == 1 + 1  # the lambda and _raise_through


def _raise_through(library):
    try:
        library.library_call("not a count")
    except TypeError:
        pass


def test_each_thread_counts_its_own_calls(modules):
    counter, program, _ = modules
    seen = {}

    def other():
        seen["other"] = counted(counter, lambda: program.calls(1000))

    counter.count_on_this_thread()
    before = counter.calls()
    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    mine = counter.calls() - before
    counter.stop_on_this_thread()
    assert seen["other"] == 1 + 1 + 1000
    assert mine < 1000  # starting and joining a thread is Python, but the other thread's calls are its own
