"""Measuring kernels on a real GPU for the compute model's database (`phantora profile`).

- `oplog`: the op signatures a simulation costed, counted per rank and written as `ops.jsonl`;
- `rebuild`: a recorded op as a real call with inputs of the recorded shapes, dtypes and strides;
- `measure`: warm-up, timed calls (profiler kernel times), median;
- `run`: the `phantora profile` pipeline, writing a `KernelDatabase` file;
- `database`: combining databases for a simulation (`--kernel-db`), naming the local GPU, the cache;
- `onthefly`: the worker process that measures unseen ops during a simulation (`--profile-on-the-fly`).

Nothing here is imported by the rank runtime except `oplog`, `database` and `onthefly`'s client, which
touch no GPU. See docs/models/compute.md, "Your own measurements".
"""
