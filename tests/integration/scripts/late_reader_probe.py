"""A rank that reads a value carried by a collective after the store's host, rank 0, has ended: rank 0 destroys
its process group and exits at once, rank 1 reads its all-reduced value seconds later in real time (TorchTitan
with a pipeline: the first stage ends while the last still reads the step's grad norm). Prints rank 1's value."""
import os
import threading

import torch
import torch.distributed as dist

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
total = torch.full((1,), float(rank + 1), device="cuda")
dist.all_reduce(total)
if rank == 0:  # no sync: that would wait for rank 1's clock
    dist.destroy_process_group()
else:
    threading.Event().wait(3.0)  # real seconds: the simulated clock does not move threading's timeouts
    print("LATE", total.item())
