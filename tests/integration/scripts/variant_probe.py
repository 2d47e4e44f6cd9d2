"""What a program sees of its GPU: name, total memory, whether 86 GiB fit (tests/integration/test_gpu_variant.py)."""
import torch
p = torch.cuda.get_device_properties(0)
print("PROBE", torch.cuda.get_device_name(0), p.total_memory)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1 << 28, device="cuda")
for _ in range(3):
    c = a @ a
    d = b + b
torch.cuda.synchronize()
try:
    x = torch.empty(int(86 * 2**30), dtype=torch.uint8, device="cuda")
    print("PROBE fits 86 GiB")
except torch.OutOfMemoryError:
    print("PROBE OOM 86 GiB")
