"""On-the-fly worker on a real GPU (run by run_check.sh): start it, measure a few recorded ops through
the rank-side client, ask again (answered from memory), stop it (cache saved), and check that a worker
for another GPU model refuses to start."""

import os
import sys
import time

from phantora.models.compute import KernelDatabase
from phantora.models.ops import OpCall, TensorMeta
from phantora.models.opcall import decode_op
from phantora.profiler.oplog import read_ops
from phantora.profiler.onthefly import OnTheFlyClient, OnTheFlyError, start_worker

out = os.environ.get("OUT", "/tmp")
records = read_ops(sys.argv[1]).records.values()
wanted = ["aten.mm.default", "aten.embedding.default", "aten.nll_loss_forward.default", "aten._foreach_norm.Scalar"]
picks = []
for name in wanted:
    recs = sorted((r for r in records if r["op"] == name), key=lambda r: -r["calls"] * r["est_ns"])
    picks += [decode_op(r) for r in recs[:1]]
picks.append(OpCall("aten.no_such_op.default", (TensorMeta((4,), "float32", (1,)),), (), ()))

try:
    start_worker(gpu="h100", cache=f"{out}/otf_cache/h100.jsonl")
    print("UNEXPECTED: a worker for h100 started on this GPU")
except OnTheFlyError as error:
    print("refused as expected:", error)

t0 = time.monotonic()
worker = start_worker(gpu="h200", cache=f"{out}/otf_cache/h200.jsonl")
print(f"worker ready in {time.monotonic() - t0:.1f} s on {worker.device_name}")
client = OnTheFlyClient(worker.address)
for op in picks:
    t0 = time.monotonic()
    entry, reason = client.measure(op)
    print(f"{op.name}: {entry} {reason!r} ({time.monotonic() - t0:.2f} s)")
t0 = time.monotonic()
again, _ = client.measure(picks[0])
print(f"again: {again} ({time.monotonic() - t0:.3f} s)")
worker.stop()
db = KernelDatabase.load(f"{out}/otf_cache/h200.jsonl")
print(f"cache: {len(db)} entries, meta {db.meta}")
