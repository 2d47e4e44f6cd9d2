"""On-the-fly profiling: ops that no database knows are measured on the real GPU during a simulation.

Note: [On-the-fly profiling]
Rank processes fake CUDA, so they cannot run a real kernel. With `--profile-on-the-fly` the CLI starts
one worker process (`python -m phantora.profiler.onthefly`, a plain PyTorch process with real CUDA and
no interception) before the ranks, and hands them its address. A rank whose cost model answers an op
from the analytic or generic model (not from a database) sends the op to the worker and waits; the
worker rebuilds and measures it (profiler/measure.py, as `phantora profile` does) or answers from
what it already measured, and the rank adds the entry to its database and uses it. The worker keeps
its measurements in `<cache dir>/<gpu>.jsonl` (a `KernelDatabase` file), which later runs load as an
extra database before they start: an op is measured once, ever, and a rerun with the same cache gives
the same simulated times bit for bit. Ops that cannot be measured keep their model estimate (the rank
warns once per op name). The worker serves requests one at a time (one GPU); several ranks asking for
the same op get the same answer. It measures in its main thread (the profiler wants that) and serves
its connections with one selector loop. The cache file is rewritten atomically under a lock file, merged
with what other runs wrote meanwhile.

Wire format: one JSON object per line over TCP on 127.0.0.1. Request `{"token", "op": <ops record>}`
-> `{"ok": true, "entry": {...}}` or `{"ok": false, "reason": "..."}`; `{"token", "shutdown": true}`
saves and stops. The worker prints one line on stdout when it is ready: `READY <port> <token>
<device name>`, or `ERROR <message>`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from phantora.models.compute import DbEntry, KernelDatabase
from phantora.models.ops import OpCall
from phantora.profiler.oplog import encode_record

_READY_TIMEOUT_S = 300.0
"""How long the CLI waits for the worker to initialize CUDA and open its socket."""
_SAVE_INTERVAL_S = 10.0


class OnTheFlyError(RuntimeError):
    """The worker could not start (no GPU, another GPU model) or went away."""


# ----------------------------------------------------------------------------- rank side


class OnTheFlyClient:
    """A rank's connection to the worker (thread-safe; connects on first use)."""

    def __init__(self, address: str) -> None:
        hostport, _, self._token = address.partition("#")
        host, _, port = hostport.rpartition(":")
        self._addr = (host, int(port))
        self._lock = threading.Lock()
        self._file = None

    def measure(self, op: OpCall) -> tuple[DbEntry | None, str]:
        """The op's measured entry, or (None, reason) when the worker could not measure it."""
        line = json.dumps({"token": self._token, "op": encode_record(op)}, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                if self._file is None:
                    sock = socket.create_connection(self._addr)
                    self._file = sock.makefile("rwb")
                self._file.write(line.encode())
                self._file.flush()
                reply = self._file.readline()
            except OSError as error:
                raise OnTheFlyError(f"phantora: the on-the-fly profiler worker is unreachable ({error})") from None
        if not reply:
            raise OnTheFlyError("phantora: the on-the-fly profiler worker closed the connection (did it crash?)")
        msg = json.loads(reply)
        if not msg.get("ok"):
            return None, str(msg.get("reason", "unknown"))
        return DbEntry.from_record(msg["entry"]), ""


# ----------------------------------------------------------------------------- CLI side


@dataclass
class WorkerHandle:
    """The running worker, from the CLI's side."""

    proc: subprocess.Popen
    address: str
    device_name: str

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the worker to save its cache and exit; kill it if it does not."""
        host, _, rest = self.address.partition(":")
        port, _, token = rest.partition("#")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
                s.sendall((json.dumps({"token": token, "shutdown": True}) + "\n").encode())
                s.makefile("rb").readline()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_worker(*, gpu: str, cache: str | Path, device: str = "cuda:0", warmup: int = 3, repeat: int = 5) -> WorkerHandle:
    """Start the worker and wait until it is ready; OnTheFlyError (one line) if it cannot measure here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHANTORA_RUN")}
    argv = [sys.executable, "-m", "phantora.profiler.onthefly", "--gpu", gpu, "--cache", str(cache),
            "--device", device, "--warmup", str(warmup), "--repeat", str(repeat)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True,
                            process_group=0)
    line = _readline(proc, _READY_TIMEOUT_S)
    if line.startswith("READY "):
        _, port, token, name = line.rstrip("\n").split(" ", 3)
        threading.Thread(target=_drain, args=(proc,), daemon=True).start()
        return WorkerHandle(proc, f"127.0.0.1:{port}#{token}", name)
    proc.kill()
    proc.wait()
    reason = line.removeprefix("ERROR ").strip() or f"it exited with code {proc.returncode}"
    raise OnTheFlyError(f"--profile-on-the-fly: {reason}")


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0] if box else ""


def _drain(proc: subprocess.Popen) -> None:
    for _ in proc.stdout:
        pass


# ----------------------------------------------------------------------------- the worker


class _Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        from phantora.profiler.measure import MeasureConfig, Measurer

        self.gpu = args.gpu
        self.cache = Path(args.cache)
        self.config = MeasureConfig(device=args.device, warmup=args.warmup, repeat=args.repeat)
        self.measurer = Measurer(self.config)  # RuntimeError without CUDA
        self.device_name = self.measurer.device_name()
        self.db = KernelDatabase.load(self.cache) if self.cache.exists() else KernelDatabase(self.gpu)
        if self.db.gpu != self.gpu:
            raise OnTheFlyError(f"the cache {self.cache} holds {self.db.gpu} kernels, not {self.gpu}")
        self.failed: dict[str, str] = {}
        self.dirty = False
        self._last_save = 0.0

    def answer(self, request: dict) -> dict:
        from phantora.models.opcall import decode_op, signature

        try:
            op = decode_op(request["op"])
        except (KeyError, TypeError, ValueError) as error:
            return {"ok": False, "reason": f"unreadable op record: {error}"}
        sig = signature(op)
        entry = self.db.entries.get(sig)
        if entry is None and sig not in self.failed:
            box: list = []
            self.measurer.measure([op], lambda i, m, reason: box.append((m, reason)))
            m, reason = box[0]
            if m is None:
                self.failed[sig] = reason
            else:
                entry = DbEntry(m.kernel_ns, m.n_kernels, len(m.samples_ns), self.config.origin, op.name, m.kernels)
                self.db.add(op, entry)
                self.dirty = True
                self._maybe_save()
        if entry is None:
            return {"ok": False, "reason": self.failed[sig]}
        return {"ok": True, "entry": entry.record()}

    def _maybe_save(self) -> None:
        if time.monotonic() - self._last_save >= _SAVE_INTERVAL_S:
            self.save()
            self._last_save = time.monotonic()

    def save(self) -> None:
        if not self.dirty:
            return
        import fcntl

        import torch
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        self.db.meta.update({"measured_on": self.device_name, "torch": torch.__version__, "tool": "phantora on-the-fly",
                             "timer": self.config.timer, "warmup": self.config.warmup, "repeat": self.config.repeat,
                             "l2": "cold"})
        with open(self.cache.with_name(self.cache.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            db = self.db
            if self.cache.exists():  # another run may have added entries meanwhile: keep them (ours win ties)
                try:
                    db = db.merge(KernelDatabase.load(self.cache))
                except ValueError:
                    pass
            tmp = self.cache.with_name(self.cache.name + f".{os.getpid()}.tmp")
            db.save(tmp)
            tmp.replace(self.cache)
        self.dirty = False


def serve(args: argparse.Namespace) -> int:
    try:
        worker = _Worker(args)
    except (RuntimeError, ValueError, OSError) as error:
        print(f"ERROR {error}; on-the-fly profiling measures ops on a real GPU of this machine", flush=True)
        return 1
    if args.device != "cpu":
        from phantora.profiler.database import gpu_key_for_device
        local = gpu_key_for_device(worker.device_name)
        if local != args.gpu:
            print(f"ERROR the local GPU is {worker.device_name} ({local or 'unknown model'}) but the simulation is "
                  f"for {args.gpu}: on-the-fly measurements must come from the simulated GPU model", flush=True)
            return 1
    token = secrets.token_hex(16)
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytearray] = {}
    print(f"READY {server.getsockname()[1]} {token} {worker.device_name}", flush=True)

    def drop(conn: socket.socket) -> None:
        selector.unregister(conn)
        buffers.pop(conn, None)
        conn.close()

    parent = os.getppid()
    stopping = False
    try:
        while not stopping and os.getppid() == parent:  # an orphaned worker (launcher killed) exits
            for key, _ in selector.select(timeout=1.0):
                conn = key.fileobj
                if conn is server:
                    try:
                        new, _ = server.accept()
                    except BlockingIOError:
                        continue
                    new.setblocking(False)
                    selector.register(new, selectors.EVENT_READ)
                    buffers[new] = bytearray()
                    continue
                try:
                    data = conn.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    drop(conn)
                    continue
                buf = buffers[conn]
                buf += data
                while b"\n" in buf:
                    raw, _, rest = bytes(buf).partition(b"\n")
                    buf = buffers[conn] = bytearray(rest)
                    reply, stopping = _respond(worker, token, raw)
                    if reply is None:  # not ours: hang up
                        drop(conn)
                        break
                    conn.setblocking(True)
                    conn.sendall(reply)
                    conn.setblocking(False)
    finally:
        worker.save()
        server.close()
    return 0


def _respond(worker: _Worker, token: str, raw: bytes) -> tuple[bytes | None, bool]:
    """The reply to one request line, and whether to stop; None for a request without the token."""
    try:
        request = json.loads(raw)
    except json.JSONDecodeError:
        return None, False
    if not isinstance(request, dict) or request.get("token") != token:
        return None, False
    if request.get("shutdown"):
        worker.save()
        return b'{"ok": true}\n', True
    return (json.dumps(worker.answer(request)) + "\n").encode(), False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m phantora.profiler.onthefly",
                                     description="On-the-fly profiler worker (started by phantora run/torchrun).")
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
