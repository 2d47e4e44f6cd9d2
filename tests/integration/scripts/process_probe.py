"""Prints, as one `PROBE {json}` line, what a rank process can observe of how it was started (tests/integration/
test_forked_ranks.py compares a rank forked from the fork server with one started by exec)."""
import gc
import json
import multiprocessing
import os
import random
import signal
import sys
import threading
import time

import numpy
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
handlers = {name: repr(signal.getsignal(getattr(signal, name))) for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD")}
print("PROBE " + json.dumps({
    "argv": sys.argv, "path0": sys.path[0], "name": __name__, "main_file": sys.modules["__main__"].__file__,
    "cwd": os.getcwd(), "own_group": os.getpgid(0) == os.getpid(), "parent_is_launcher":
        os.getppid() == int(os.environ["PHANTORA_LAUNCHER_PID"]),
    "fds": sorted(os.listdir("/proc/self/fd")), "threads": threading.active_count(),
    "torch_threads": torch.get_num_threads(), "write_through": sys.stdout.write_through,
    "line_buffering": sys.stdout.line_buffering, "stdin_tty": os.isatty(0), "handlers": handlers,
    "env": sorted(os.environ), "rank": dist.get_rank(), "cuda": torch.cuda.device_count(),
    "random": random.random(), "numpy": float(numpy.random.random()),
    "authkey": multiprocessing.current_process().authkey.hex(),
    "simulated_clock": abs(time.monotonic() - time.clock_gettime(time.CLOCK_MONOTONIC)) > 1.0,
    "forked": b"phantora.runtime.zygote" in open("/proc/self/cmdline", "rb").read(),
    "runtime_frozen": gc.get_freeze_count() > 100_000,  # torch's and the runtime's objects: out of the collector's way
}), flush=True)
dist.destroy_process_group()
