"""`--profile-on-the-fly` for the launcher: start the profiler worker (profiler/onthefly.py). The `profile`
command itself is profiler/command.py."""

from __future__ import annotations

import sys


def start_on_the_fly(config, *, cache_dir: str | None, device: str):
    """`--profile-on-the-fly`: start the profiler worker (profiler/onthefly.py Note [On-the-fly profiling])
    and give the ranks its address and the cache as an extra database. Returns (config, worker);
    raises OnTheFlyError (one line) when this machine cannot measure for the simulated GPU."""
    from dataclasses import replace

    from phantora.profiler.database import cache_file, default_cache_dir
    from phantora.profiler.onthefly import start_worker

    rank = config.rank_config
    cache = cache_file(cache_dir or default_cache_dir(), rank.gpu)
    worker = start_worker(gpu=rank.gpu, cache=cache, device=device)
    print(f"phantora: profiling unseen ops on the fly on {worker.device_name} (cache {cache})", file=sys.stderr)
    dbs = ((str(cache),) if cache.is_file() else ()) + rank.kernel_databases  # --kernel-db files win ties
    try:
        config = replace(config, rank_config=replace(rank, kernel_databases=dbs, profile_worker=worker.address))
    except BaseException:
        worker.stop()
        raise
    return config, worker
