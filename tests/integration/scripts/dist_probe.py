"""Exercises the c10d surface a training script uses; prints what each rank saw as one JSON line."""
import json
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank % torch.cuda.device_count())
seen = {"backend": dist.get_backend(), "nccl": dist.is_nccl_available(), "world": world}

x = torch.ones(1 << 20, device="cuda")  # 4 MiB
torch.cuda.synchronize()
t0 = time.perf_counter()
dist.all_reduce(x)
torch.cuda.synchronize()
seen["all_reduce_4MiB_ms"] = 1e3 * (time.perf_counter() - t0)

out = torch.empty(world * x.numel(), device="cuda")
dist.all_gather_into_tensor(out, x)
dist.reduce_scatter_tensor(x, out)
dist.broadcast(x, src=0)
dist.reduce(x, dst=0)
dist.all_to_all_single(torch.empty_like(x), x)
dist.all_gather([torch.empty_like(x) for _ in range(world)], x)

work = dist.all_reduce(x, async_op=True)
work.wait()

peer = (rank + 1) % world
left = (rank - 1) % world
ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, torch.empty_like(x), left)]
for w in dist.batch_isend_irecv(ops):
    w.wait()

objects = [None] * world
dist.all_gather_object(objects, {"rank": rank})
seen["objects"] = objects
box = [{"from": rank}]
dist.broadcast_object_list(box, src=0)
seen["broadcast_object"] = box[0]

mesh = init_device_mesh("cuda", (world,))
y = funcol.all_reduce(torch.ones(1024, device="cuda"), "sum", mesh)
y = funcol.all_gather_tensor(y, 0, mesh)
seen["funcol_shape"] = list(y.wait() .shape if hasattr(y, "wait") else y.shape)

sub = dist.new_group([0, 1])
if rank in (0, 1):
    dist.all_reduce(x, group=sub)

# mixture-of-experts routing: tokens counted per expert (random placeholder), counts exchanged
experts = torch.randint(0, 4 * world, (1000,), device="cuda")
counts = torch.bincount(experts, minlength=4 * world)
received = funcol.all_to_all_single(counts, None, None, dist.group.WORLD)
seen["funcol_result"] = type(received).__name__  # as on a GPU, not the tracing path's plain tensor
seen["moe_counts"] = torch.cat([counts, received]).tolist()
free_before = torch.cuda.memory_allocated()
by_rank = received.view(world, 4)  # a view of a functional collective's result allocates nothing
seen["funcol_view_bytes"] = torch.cuda.memory_allocated() - free_before
# host time of functional collectives and of ops on their results, against plain tensors (simulated clock)
def host_us(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, 1e6 * (time.perf_counter() - t0)
rows = torch.ones(8 * world, 16, device="cuda")
_, seen["all_reduce_us"] = host_us(lambda: funcol.all_reduce(rows, "sum", dist.group.WORLD))
routed, seen["all_to_all_us"] = host_us(lambda: funcol.all_to_all_single(rows, None, None, dist.group.WORLD))
pieces, seen["split_result_us"] = host_us(lambda: routed.split(4))  # wraps 2 * world pieces
_, seen["cat_result_us"] = host_us(lambda: torch.cat(pieces[:world]))  # waits on world of them, wraps none
fresh = funcol.all_to_all_single(rows, None, None, dist.group.WORLD)
_, seen["view_result_us"] = host_us(lambda: fresh.view(-1))  # the wrapper's fast path: wraps, waits on nothing
_, seen["view_plain_us"] = host_us(lambda: rows.view(-1))
plain, seen["split_plain_us"] = host_us(lambda: rows.split(4))
_, seen["cat_plain_us"] = host_us(lambda: torch.cat(plain[:world]))
seen["object_p2p"] = None
if world >= 2 and rank in (0, 1):  # objects sent point to point: the receiver blocks only through the simulator
    if rank == 0:
        dist.send_object_list([{"to": 1}], dst=1)
    else:
        box = [None]
        dist.recv_object_list(box, src=0)
        seen["object_p2p"] = box[0]

indices = torch.tensor([3, 1, 2], dtype=torch.int64).cuda()
dist.broadcast(indices, src=0)
seen["broadcast_indices"] = indices.cpu().tolist()  # small host data keeps its values

dist.barrier()
torch.cuda.synchronize()
seen["end_ms"] = 1e3 * time.perf_counter()
print("PROBE " + json.dumps(seen), flush=True)
dist.destroy_process_group()
