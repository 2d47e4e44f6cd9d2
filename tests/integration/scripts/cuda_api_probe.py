"""Exercises the torch.cuda surface a training script uses; prints what it saw as one JSON line."""

import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

seen = {}
seen["available"] = torch.cuda.is_available()
seen["count"] = torch.cuda.device_count()
seen["name"] = torch.cuda.get_device_name()
seen["capability"] = list(torch.cuda.get_device_capability())
props = torch.cuda.get_device_properties(0)
seen["total_memory"] = props.total_memory
seen["sms"] = props.multi_processor_count
seen["bf16"] = torch.cuda.is_bf16_supported()
torch.cuda.set_device(0)
seen["current_device"] = torch.cuda.current_device()
with torch.cuda.device(0):
    pass

# host runs ahead; synchronize waits; events time the GPU work
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10):
    b = a @ a
end.record()
t_launch = time.perf_counter() - t0
end.synchronize()
t_sync = time.perf_counter() - t0
seen["launch_s"] = t_launch
seen["sync_s"] = t_sync
seen["event_ms"] = start.elapsed_time(end)

# an event recorded on an idle stream completes when the host records it
torch.cuda.synchronize()
time.sleep(0.010)
start.record()
c = a @ a
end.record()
end.synchronize()
seen["event_after_idle_ms"] = start.elapsed_time(end)

# two streams overlap; wait_stream orders
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
torch.cuda.synchronize()
t0 = time.perf_counter()
with torch.cuda.stream(s1):
    x1 = a @ a
with torch.cuda.stream(s2):
    x2 = a @ a
torch.cuda.synchronize()
seen["two_streams_s"] = time.perf_counter() - t0
t0 = time.perf_counter()
with torch.cuda.stream(s1):
    y1 = a @ a
s2.wait_stream(s1)
with torch.cuda.stream(s2):
    y2 = a @ a
torch.cuda.synchronize()
seen["ordered_streams_s"] = time.perf_counter() - t0
seen["stream_is_current"] = torch.cuda.current_stream() == torch.cuda.default_stream()
y2.record_stream(s2)

# value reads are placeholders
seen["item"] = a.sum().item()
seen["finite_all"] = bool(torch.isfinite(a).all())
seen["any"] = bool((a > 0).any())
seen["nonzero_shape"] = list(torch.nonzero(a[:4, :4]).shape)
seen["cpu_copy"] = a[:2, :2].cpu().tolist()
# values made from arguments alone are real (Note [Shadow values]): a round-robin routing's counts, a sum
seen["round_robin_counts"] = torch.bincount(torch.arange(64, device="cuda").remainder(8).view(32, 2).flatten(),
                                            minlength=8).tolist()
seen["arange_sum"] = torch.arange(10, device="cuda").sum().item()
counts = torch.zeros(16, dtype=torch.int64, device="cuda")
t0 = time.perf_counter()
seen["tolist"] = counts.tolist()  # one device-to-host copy and one wait, as on a GPU: not one per element
seen["tolist_us"] = 1e6 * (time.perf_counter() - t0)
t0 = time.perf_counter()
seen["item_of_one"] = counts[0].item()
seen["item_us"] = 1e6 * (time.perf_counter() - t0)
# torch.tensor of GPU scalars reads each to the host, as item() does (Megatron's gradient norm without Apex)
t0 = time.perf_counter()
norms = torch.tensor([a.norm(), a[0].sum(), torch.arange(4, device="cuda").sum()])
seen["scalars_to_tensor_us"] = 1e6 * (time.perf_counter() - t0)
seen["scalars_to_tensor"] = [norms.device.type, *norms.tolist()]

# a GEMM of two dtypes fails as on a GPU (its meta kernel alone would accept it: Note [Checks of the CUDA kernels])
try:
    torch.nn.functional.linear(torch.randn(4, 8, device="cuda"), torch.randn(8, 8, device="cuda", dtype=torch.bfloat16))
    seen["mixed_dtype_gemm"] = None
except RuntimeError as error:
    seen["mixed_dtype_gemm"] = str(error)

# pinned host memory reads as pinned, also a large host tensor kept fake; a copy from it leaves the host
# free, one from pageable memory waits for the stream (Note [Pinned host memory])
pageable = torch.randn(256, 256)
pinned = pageable.pin_memory()
token_ids = torch.zeros(2048, 1024, dtype=torch.int64).pin_memory()
seen["pinned"] = [pinned.is_pinned(), pinned[1:].is_pinned(), pageable.is_pinned(), token_ids.is_pinned()]
# and an empty list to the GPU (Hugging Face's DynamicCache, every layer) copies nothing and leaves the host free
# (models/ops.py Note [Ops without elements])
copies = (("pinned_copy_us", pinned.cuda, {"non_blocking": True}), ("pageable_copy_us", pageable.cuda, {}),
          ("empty_copy_us", torch.tensor, {"data": [], "device": "cuda"}))
for name, copy, kwargs in copies:
    torch.cuda.synchronize()
    for _ in range(10):
        a @ a
    t0 = time.perf_counter()
    copy(**kwargs)
    seen[name] = 1e6 * (time.perf_counter() - t0)
torch.cuda.synchronize()

# memory API
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
seen["alloc_delta"] = torch.cuda.memory_allocated() - before
seen["reserved_ge_alloc"] = torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
del big
seen["after_free"] = torch.cuda.memory_allocated() - before
seen["peak_delta"] = torch.cuda.max_memory_allocated() - before
free, total = torch.cuda.mem_get_info()
seen["mem_info_ok"] = 0 < free < total == props.total_memory
seen["stats_keys"] = "allocated_bytes.all.peak" in torch.cuda.memory_stats()
torch.cuda.empty_cache()

# training features: autocast + GradScaler (fp16), checkpointing, pin_memory, RNG state
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).cuda()
opt = torch.optim.AdamW(model.parameters(), foreach=True)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(32, 256).pin_memory().cuda(non_blocking=True)
with torch.autocast("cuda", dtype=torch.float16):
    h = checkpoint(model, x, use_reentrant=False)
    loss = F.mse_loss(h.float(), torch.zeros_like(h, dtype=torch.float32))
scaler.scale(loss).backward()
scaler.step(opt)
scaler.update()
seen["grad_dtype"] = str(model[0].weight.grad.dtype)
seen["param_device"] = str(model[0].weight.device)
state = torch.cuda.get_rng_state()
torch.cuda.manual_seed(0)
torch.cuda.set_rng_state(state)
seen["rng_state_len"] = int(state.numel())
torch.cuda.manual_seed(2**64 - 5)  # a seed above 2**63 (TorchTitan's) survives a state round trip
torch.cuda.set_rng_state(torch.cuda.get_rng_state())
seen["big_seed"] = torch.cuda.initial_seed()

compiled = torch.compile(model)
seen["compiled_runs"] = list(compiled(torch.randn(2, 256, device="cuda")).shape)
seen["graph_type_named"] = str(torch.cuda.CUDAGraph | None)  # libraries annotate with it at import
unsupported = {"MemPool": torch.cuda.MemPool, "caching_allocator_alloc": lambda: torch.cuda.caching_allocator_alloc(64),
               "ExternalStream": lambda: torch.cuda.ExternalStream(1234),
               "jiterator": torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")}
seen["unsupported_errors"] = {}
for name, use in unsupported.items():
    try:
        use()
        seen["unsupported_errors"][name] = None
    except NotImplementedError as error:
        seen["unsupported_errors"][name] = str(error)

print("PROBE " + json.dumps(seen))
