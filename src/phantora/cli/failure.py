"""The failure report printed when a simulated job fails, in the format of torchrun's ChildFailedError
(torch/distributed/elastic/multiprocessing/errors/__init__.py: `_MSG_FORMAT_TEMPLATE`,
`_FAILURE_FORMAT_TEMPLATE`), so people and tools that read torchrun's reports read ours."""

from __future__ import annotations

import json
import signal
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_TRACEBACK_START = "Traceback (most recent call last):"
_FAULTHANDLER_START = "Fatal Python error: "
"""How Python's faulthandler begins the stacks it dumps (a rank the hang watchdog aborted)."""
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
_WIDTH = 60
_NA = "<N/A>"


@dataclass(frozen=True, slots=True)
class RankExit:
    """A rank process that ended, and how."""

    rank: int
    local_rank: int
    pid: int
    exit_code: int
    """The process's exit status; negative: killed by that signal (as subprocess reports it)."""
    wall_time: float
    """time.time() when the launcher saw it end."""
    error_file: str | None = None
    """TORCHELASTIC_ERROR_FILE, when the program wrote one (torch's @record decorator)."""
    stderr_tail: tuple[str, ...] = ()
    note: str = ""
    """What else is known (e.g. "disconnected from the coordinator before it finished")."""
    host: str = ""
    """The machine it ran on, when not this one (a rank of another launcher: cli/multinode.py)."""


@dataclass(frozen=True, slots=True)
class CoordinatorFault:
    """The coordinator stopped the simulation (records that cannot be simulated, a deadlock)."""

    message: str
    wall_time: float


def traceback_tail(lines: list[str] | tuple[str, ...]) -> str:
    """The last Python traceback in `lines`, whole, with the exceptions chained before it (or the last stacks
    faulthandler dumped); the last few lines when there is none."""
    lines = list(lines)
    starts = [i for i, line in enumerate(lines) if _starts_stack(line)]
    if not starts:
        return "\n".join(lines[-10:])
    first = starts[-1]
    for start in reversed(starts[:-1]):  # walk back over "During handling of the above exception ..."
        between = [line for line in lines[start:first] if line.strip()]
        if not any(line in _CHAINED for line in between[-1:]):
            break
        first = start
    return "\n".join(lines[first:])


def _starts_stack(line: str) -> bool:
    return line.startswith((_TRACEBACK_START, _FAULTHANDLER_START))


def _error_file_message(path: str | None) -> str | None:
    """The traceback torch's @record wrote into TORCHELASTIC_ERROR_FILE, if any."""
    if not path or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text())
        message = data["message"]
        if isinstance(message, dict):
            return message.get("extraInfo", {}).get("py_callstack") or message.get("message")
        return str(message)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _signal_name(exit_code: int) -> str:
    if exit_code >= 0:
        return ""
    try:
        return f" ({signal.Signals(-exit_code).name})"
    except ValueError:
        return ""


def _stamp(wall_time: float) -> str:
    return datetime.fromtimestamp(wall_time).strftime("%Y-%m-%d_%H:%M:%S")


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


def _format_rank(idx: int, failure: RankExit) -> str:
    message = _error_file_message(failure.error_file)
    if message is None:
        message = traceback_tail(failure.stderr_tail) or "(no output on stderr)"
        if failure.exit_code < 0:  # what it printed before the signal (faulthandler's stacks) may follow
            signalled = f"Signal {-failure.exit_code}{_signal_name(failure.exit_code)} received by PID {failure.pid}"
            message = f"{signalled}\n{message}" if any(map(_starts_stack, failure.stderr_tail)) else signalled
    if failure.note:
        message = f"{failure.note}\n{message}"
    error_file = failure.error_file if _error_file_message(failure.error_file) is not None else _NA
    return (f"[{idx}]:\n"
            f"  time      : {_stamp(failure.wall_time)}\n"
            f"  host      : {failure.host or socket.gethostname()}\n"
            f"  rank      : {failure.rank} (local_rank: {failure.local_rank})\n"
            f"  exitcode  : {failure.exit_code} (pid: {failure.pid}){_signal_name(failure.exit_code)}\n"
            f"  error_file: {error_file}\n"
            f"  traceback : {_indent(message)}")


def _format_coordinator(idx: int, fault: CoordinatorFault) -> str:
    return (f"[{idx}]:\n"
            f"  time      : {_stamp(fault.wall_time)}\n"
            f"  host      : {socket.gethostname()}\n"
            f"  rank      : coordinator (the simulated cluster)\n"
            f"  error     : {_indent(fault.message)}")


def format_failure_report(title: str, root: RankExit | CoordinatorFault, others: list[RankExit]) -> str:
    """torchrun's "<title> FAILED" block: other failures first, then the root cause."""
    border, section = "=" * _WIDTH, "-" * _WIDTH
    root_text = _format_coordinator(0, root) if isinstance(root, CoordinatorFault) else _format_rank(0, root)
    other_text = "\n".join(_format_rank(i + 1, f) for i, f in enumerate(others)) or "  <NO_OTHER_FAILURES>"
    return (f"{border}\n{title} FAILED\n{section}\nFailures:\n{other_text}\n{section}\n"
            f"Root Cause (first observed failure):\n{root_text}\n{border}")
