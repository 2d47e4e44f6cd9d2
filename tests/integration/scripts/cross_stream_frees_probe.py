"""A block used on another stream (`record_stream`) and freed returns to its pool once the GPU has passed that
use, whether or not the host ever synchronizes with that stream: FSDP1's pattern, a shard made on one stream,
read on another, freed, made again for the next layer. Prints the memory reserved as it goes."""

import json

import torch

MIB = 1 << 20
side = torch.cuda.Stream()
weight = torch.randn(256, 256, device="cuda")
reserved = []
for step in range(12):
    with torch.cuda.stream(side):
        shard = torch.empty(64 * MIB // 4, device="cuda")  # 64 MiB in side's pool
    torch.cuda.current_stream().wait_stream(side)
    shard.record_stream(torch.cuda.current_stream())
    (weight @ weight).relu_()  # a few µs on the GPU: it keeps up with the host
    del shard  # pending until the default stream passes this point
    reserved.append(torch.cuda.memory_reserved() // MIB)

event_reserved = []
for step in range(6):  # the host waits for each use with an event (FSDP1's rate limiter), the GPU is behind
    with torch.cuda.stream(side):
        shard = torch.empty(64 * MIB // 4, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    shard.record_stream(torch.cuda.current_stream())
    big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(4):
        big = big @ big  # about 4 ms on the GPU, far more than the host's time to issue it
    done = torch.cuda.Event()
    done.record()
    del shard, big
    done.synchronize()
    event_reserved.append(torch.cuda.memory_reserved() // MIB)
print("PROBE " + json.dumps({"reserved_mib": reserved, "event_reserved_mib": event_reserved}))
