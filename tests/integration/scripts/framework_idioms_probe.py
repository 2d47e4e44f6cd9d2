"""What frameworks do at start-up and around their steps (DeepSpeed, Lightning, Accelerate, FSDP), in plain
torch: a bound device at init, NVTX ranges, weak references on parameters, `param.data =`, small values
decided on one rank and sent through collectives, pinned batches, addresses, `no_dispatch()`. Prints what
each rank saw as one JSON line."""
import json
import os
import weakref

import torch
import torch.distributed as dist
from torch.utils._mode_utils import no_dispatch

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))  # DeepSpeed and Lightning bind the device
world = dist.get_world_size()
seen = {"backend": dist.get_backend()}

seen["nvtx_depths"] = [torch.cuda.nvtx.range_push("outer"), torch.cuda.nvtx.range_push("inner"),
                       torch.cuda.nvtx.range_pop(), torch.cuda.nvtx.range_pop()]
with torch.cuda.nvtx.range("step"):
    torch.cuda.nvtx.mark("here")

# DeepSpeed puts a finalizer on every parameter before the engine moves the model
embedding = torch.nn.Embedding(100, 16)
weight = embedding.weight
finalized = []
weakref.finalize(weight, finalized.append, True)
embedding.cuda()
seen["weakref_param_kept"] = embedding.weight is weight and str(weight.device) == f"cuda:{rank}"

# FSDP moving a CPU model: param.data = param.to("cuda")
linear = torch.nn.Linear(8, 8)
bias = linear.bias
for p in linear.parameters():
    p.data = p.to("cuda")
seen["set_data"] = [str(linear.weight.device), isinstance(bias, torch.nn.Parameter) and linear.bias is bias,
                    linear.bias.requires_grad]
linear(torch.randn(2, 8, device="cuda")).sum().backward()
seen["set_data_grad"] = str(linear.weight.grad.device)

# values one rank decides, sent through collectives
decided = torch.tensor([7 if rank == 0 else -1], device="cuda")
dist.broadcast(decided, src=0)
seen["broadcast"] = decided.item()
total = torch.tensor([rank + 1.0], device="cuda")
dist.all_reduce(total)
seen["all_reduce_sum"] = total.item()
flag = torch.tensor([rank], dtype=torch.uint8, device="cuda")
dist.all_reduce(flag, op=dist.ReduceOp.MAX)
seen["all_reduce_max"] = flag.item()
gathered = torch.empty(2 * world, dtype=torch.int64, device="cuda")
dist.all_gather_into_tensor(gathered, torch.tensor([rank, 10 * rank], device="cuda"))
seen["all_gather"] = gathered.tolist()
doubled = total * 2  # an op on a collective's result, read later
seen["derived"] = doubled.item()

# a data pipeline pins a batch of token ids before a non-blocking copy
batch = torch.zeros(2_000_000, dtype=torch.int64).pin_memory()
seen["pinned"] = batch.is_pinned() and batch[:10].is_pinned()
tokens = batch.to("cuda", non_blocking=True)
seen["tokens"] = [list(tokens.shape), str(tokens.device)]

# addresses
a = torch.empty(1000, device="cuda")
b = torch.empty(1000, device="cuda")
seen["addresses"] = [a.data_ptr(), b.data_ptr(), a[10:].data_ptr(), a.untyped_storage().data_ptr()]

# FSDP1 records streams with Python dispatch off
with no_dispatch():
    a.record_stream(torch.cuda.Stream())
seen["no_dispatch_record_stream"] = True

# Lightning moves the model back to the host when fit ends: large copies stay fake (no host memory)
big = torch.nn.Linear(4096, 4096, device="cuda").cpu()
seen["moved_back"] = [str(big.weight.device), type(big.weight).__name__, big.weight.is_pinned()]

print("PROBE " + json.dumps(seen))
dist.destroy_process_group()
