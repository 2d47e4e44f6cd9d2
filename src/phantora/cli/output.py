"""Rank processes' stdout and stderr: whole lines to the console with a per-rank prefix, log files.

torchrun's behaviour, where it has one (torch/distributed/elastic/multiprocessing/tail_log.py, api.py):
- the line prefix is `[{name}{local_rank}]:`, or `--log-line-prefix-template` (torchrun 2.14) or
  `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE` with `${rank}`, `${local_rank}`, `${role_name}`, `${hostname}`
  (this machine's) substituted. Phantora always prefixes (torchrun does with --tee),
  and by default with the global rank, `[rank3]:`, since every node's ranks share one console;
- `-r/--redirects` and `-t/--tee` take `0..3` (none, stdout, stderr, both) or a per-local-rank map
  `0:3,1:0`: redirected streams go to `<log dir>/attempt_0/<rank>/{stdout,stderr}.log` only, teed ones
  to the file and the console; the files get the raw lines, without prefix;
- `--local-ranks-filter 0,1` shows only those local ranks on the console (files are unaffected). As every
  node's console is this one, local rank 0 of every node is shown.

Everything is written by the launcher's main thread, one whole line at a time, so lines of different
ranks never interleave mid-line. The stderr of every rank is also kept (its last lines) for the
failure report.
"""

from __future__ import annotations

import os
import re
import selectors
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from enum import IntFlag
from pathlib import Path
from string import Template
from typing import BinaryIO, TextIO

DEFAULT_PREFIX_TEMPLATE = "[rank${rank}]:"
_READ_BYTES = 1 << 16
_MAX_PARTIAL_BYTES = 1 << 16
"""A line longer than this (a progress bar redrawn with \\r, say) is written in pieces."""
_TAIL_LINES = 1000
"""Lines of each rank's stderr kept for the failure report: enough for a deep traceback, whole."""


class Std(IntFlag):
    """Which standard streams (torchrun's `Std`)."""

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3


StdSpec = Std | dict[int, Std]
"""One value for every local rank, or a value per local rank (missing ranks: NONE)."""

_VALUE = re.compile(r"^[0123]$")
_MAPPING = re.compile(r"^(\d+:[0123],)*(\d+:[0123])$")


def parse_std(value: str, *, option: str = "--redirects") -> StdSpec:
    """torchrun's `Std.from_str`: "3" or "0:3,1:0"."""
    value = value.strip()
    if _VALUE.match(value):
        return Std(int(value))
    if _MAPPING.match(value):
        return {int(k): Std(int(v)) for k, v in (item.split(":") for item in value.split(","))}
    raise ValueError(f"{option} must be 0-3 (none, stdout, stderr, both) or a local-rank map like 0:3,1:0, "
                     f"got {value!r}")


def std_for(spec: StdSpec, local_rank: int) -> Std:
    return spec.get(local_rank, Std.NONE) if isinstance(spec, dict) else spec


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputConfig:
    """How the launcher handles the ranks' output."""

    prefix_template: str | None = DEFAULT_PREFIX_TEMPLATE
    """Line prefix (`${rank}`, `${local_rank}`, `${role_name}`, `${hostname}`); None: the rank processes write straight
    to the launcher's stdout and stderr (`phantora run`: one process, a terminal stays a terminal)."""
    local_ranks_filter: frozenset[int] | None = None
    """Local ranks whose lines reach the console; None: all."""
    redirects: StdSpec = Std.NONE
    tee: StdSpec = Std.NONE
    log_dir: str | None = None
    """Where redirected/teed streams go."""
    log_file: str = "attempt_0/{rank}/{stream}.log"
    """A rank's log file under `log_dir`, `{rank}` and `{stream}` (stdout, stderr) filled in: torchrun's
    layout; a name without `{stream}` gets both streams (DeepSpeed's `<time>_rank<N>.log`)."""

    @property
    def captures(self) -> bool:
        return self.prefix_template is not None


class _Stream:
    """One pipe of one rank: partial line, where complete lines go."""

    __slots__ = ("rank", "is_err", "prefix", "console", "log", "partial", "tail")

    def __init__(self, rank: int, is_err: bool, prefix: str, console: TextIO | None, log: BinaryIO | None,
                 tail: deque | None) -> None:
        self.rank = rank
        self.is_err = is_err
        self.prefix = prefix
        self.console = console
        self.log = log
        self.partial = bytearray()
        self.tail = tail


class OutputPump:
    """Reads every rank's pipes and writes whole, prefixed lines (main thread only)."""

    def __init__(self, config: OutputConfig, *, console_out: TextIO, console_err: TextIO,
                 role: str = "default") -> None:
        self.config = config
        self.console_out = console_out
        self.console_err = console_err
        self.role = role
        self._selector = selectors.DefaultSelector()
        self._open = 0
        self._tails: dict[int, deque] = {}
        self._logs: dict[Path, BinaryIO] = {}
        self.output_closed = False
        """A console's reader went away (`phantora torchrun ... | head`): the launcher stops the ranks."""

    # --- setup ------------------------------------------------------------------------------------
    def popen_streams(self) -> dict:
        """The stdout/stderr arguments for a rank's Popen."""
        if not self.config.captures:
            return {"stdout": None, "stderr": None}
        return {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}

    def attach(self, rank: int, local_rank: int, proc: subprocess.Popen) -> None:
        """Start reading a rank process's pipes (no-op when the ranks write to the console directly)."""
        if not self.config.captures:
            return
        cfg = self.config
        prefix = Template(cfg.prefix_template).safe_substitute(rank=rank, local_rank=local_rank, role_name=self.role,
                                                               hostname=socket.gethostname())
        shown = cfg.local_ranks_filter is None or local_rank in cfg.local_ranks_filter
        redirect, tee = std_for(cfg.redirects, local_rank), std_for(cfg.tee, local_rank)
        self._tails[rank] = deque(maxlen=_TAIL_LINES)
        for pipe, flag, is_err, console in ((proc.stdout, Std.OUT, False, self.console_out),
                                            (proc.stderr, Std.ERR, True, self.console_err)):
            log = self._open_log(rank, "stderr" if is_err else "stdout") if (redirect | tee) & flag else None
            to_console = console if shown and not redirect & flag else None
            stream = _Stream(rank, is_err, prefix, to_console, log, self._tails[rank] if is_err else None)
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe, selectors.EVENT_READ, stream)
            self._open += 1

    def _open_log(self, rank: int, stream: str) -> BinaryIO:
        path = Path(self.config.log_dir or ".") / self.config.log_file.format(rank=rank, stream=stream)
        if path not in self._logs:  # both streams of a rank may share one file
            path.parent.mkdir(parents=True, exist_ok=True)
            self._logs[path] = open(path, "wb")  # this run's output only, like the other files in --out
        return self._logs[path]

    # --- pumping ----------------------------------------------------------------------------------
    def poll(self, timeout_s: float) -> None:
        """Write what the ranks have printed; wait up to `timeout_s` for something to arrive."""
        if not self._open:
            time.sleep(timeout_s)
            return
        ready = self._selector.select(timeout_s)
        for key, _ in ready:
            self._read(key.fileobj, key.data)
        if ready:
            self._flush()

    def drain(self, timeout_s: float) -> None:
        """Read until every pipe is closed (all output is out), or `timeout_s` passed (a grandchild
        may hold a pipe open forever)."""
        deadline = time.monotonic() + timeout_s
        while self._open and time.monotonic() < deadline:
            self.poll(min(0.05, max(deadline - time.monotonic(), 0.0)))

    def _read(self, pipe, stream: _Stream) -> None:
        try:
            data = os.read(pipe.fileno(), _READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            if stream.partial:
                self._emit(stream, bytes(stream.partial))
                stream.partial.clear()
            self._selector.unregister(pipe)
            pipe.close()
            self._open -= 1
            return
        stream.partial += data
        *lines, rest = stream.partial.split(b"\n")
        for line in lines:
            self._emit(stream, line)
        if len(rest) > _MAX_PARTIAL_BYTES:
            self._emit(stream, rest)
            rest = b""
        stream.partial[:] = rest

    def _emit(self, stream: _Stream, line: bytes) -> None:
        if stream.log is not None:
            stream.log.write(line + b"\n")
        if stream.console is None and stream.tail is None:
            return
        text = line.decode("utf-8", "replace")
        if stream.tail is not None:
            stream.tail.append(text)
        if stream.console is not None:
            self._write(stream.console, f"{stream.prefix}{text}\n")

    def _write(self, console: TextIO, text: str) -> None:
        try:
            console.write(text)
        except BrokenPipeError:
            self._closed(console)

    def _flush(self) -> None:
        for console in (self.console_out, self.console_err):
            try:
                console.flush()
            except BrokenPipeError:
                self._closed(console)

    def _closed(self, console: TextIO) -> None:
        """A console whose reader went away: as command-line tools do, no traceback and no more output there
        (its descriptor now writes to /dev/null, so neither a later write nor the interpreter's last flush
        fails), and the launcher is told."""
        self.output_closed = True
        try:
            fd = console.fileno()
        except (OSError, ValueError):  # not a file (a test's buffer)
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)

    # --- the launcher's own lines and the failure report ---------------------------------------
    def say(self, message: str) -> None:
        """A line of the launcher's own on stderr (never in the middle of a rank's line)."""
        self._write(self.console_err, message + "\n")
        self._flush()

    def stderr_tail(self, rank: int) -> list[str]:
        """The last lines the rank wrote to stderr (empty when its output was not captured)."""
        return list(self._tails.get(rank, ()))

    def close(self) -> None:
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fileobj)
            key.fileobj.close()
        self._open = 0
        self._selector.close()
        for log in self._logs.values():
            log.close()
        self._flush()
