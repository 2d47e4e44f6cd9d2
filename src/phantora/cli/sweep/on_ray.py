"""Running a sweep's points as Ray tasks on an existing Ray cluster (`phantora sweep --ray ADDRESS`).

Ray schedules: each point is one task asking for `cpus` CPUs (a core per rank process, Note [How many points at
a time] in local.py), so Ray runs as many at a time as the cluster's nodes have cores. A task runs the point
as on a single machine (points.py: a `phantora` process of its own, its output in `output.log`) in a temporary
folder of its node, in the folder the sweep was started from (where the program's relative paths point: the same
path on every node, a shared file system, or `--ray-working-dir`, which Ray copies to the nodes), and returns the
point's folder as a tar archive that the sweep unpacks into the point's folder here: the nodes need no storage
in common with this machine. `--ray local` starts a Ray instance on this machine for the sweep.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from phantora.cli.sweep.grid import Point
from phantora.cli.sweep.local import Interrupted
from phantora.cli.sweep.points import PointRun, run_point


_NOT_ENDED = -1
"""The exit code recorded for a point whose task Ray could not run: not done (points.interrupted), so a resumed
sweep tries it again."""


class RayError(Exception):
    """Ray is missing or could not connect (one line)."""


def execute_point(point: Point, cwd: str | None) -> tuple[int, float, bytes]:
    """The Ray task: run `point` in a temporary folder of this node; its exit code, wall time and the folder
    packed as tar."""
    if cwd is not None and not Path(cwd).is_dir():
        raise RuntimeError(f"the sweep's folder {cwd} is not on this node ({os.uname().nodename}): put the program "
                           "on a file system every node shares, or pass --ray-working-dir")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="phantora-point-") as tmp:
        folder = Path(tmp) / point.name
        code = run_point(PointRun(point, folder), Path(cwd) if cwd else None)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            archive.add(folder, arcname=".")
    return code, time.monotonic() - started, buffer.getvalue()


def _unpack(archive: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


def run_on_ray(runs: list[PointRun], *, address: str, cpus: float, working_dir: str | None,
               on_end: Callable[[PointRun, int, float, int], None]) -> None:
    """Run `runs` as Ray tasks on the cluster at `address` ("local": a new instance here); `on_end` as in
    local.run_locally. Raises Interrupted on Ctrl-C, after cancelling the tasks."""
    try:
        import ray
    except ImportError:
        raise RayError("--ray needs Ray: pip install 'phantora[ray]'") from None
    runtime_env = {"working_dir": working_dir} if working_dir else None
    try:
        ray.init(address=None if address == "local" else address, runtime_env=runtime_env,
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise RayError(f"--ray {address}: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    try:
        task = ray.remote(num_cpus=cpus, max_retries=0)(execute_point)
        cwd = None if working_dir else os.getcwd()
        pending = {task.remote(run.point, cwd): run for run in runs}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                run = pending.pop(ready[0])
                try:
                    code, wall_s, archive = ray.get(ready[0])
                except ray.exceptions.RayError as error:
                    _task_failed(run, error)
                    on_end(run, _NOT_ENDED, 0.0, len(pending))
                    continue
                _unpack(archive, run.folder)
                on_end(run, code, wall_s, len(pending))
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise Interrupted() from None
    finally:
        ray.shutdown()


def _task_failed(run: PointRun, error: Exception) -> None:
    """A task that Ray could not run (its node died, the program's folder is not there): an error in the table,
    the reason in its log, run again by a resumed sweep."""
    run.folder.mkdir(parents=True, exist_ok=True)
    lines = str(error).strip().splitlines()
    (run.folder / "output.log").write_text(f"phantora: error: the Ray task failed: {lines[-1] if lines else error}\n")
    run.finish(_NOT_ENDED, 0.0)
