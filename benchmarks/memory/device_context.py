"""Device properties and CUDA-context memory of the GPU (run first, in a fresh process).

cuda_context_bytes = total - free (mem_get_info) - memory_reserved, read after CUDA init and a
first bf16 matmul (cuBLAS handle + workspace); later readings after more kernels show how lazy
module loading grows the context. Writes $OUT/device.json.
"""

import json
import subprocess
import sys
import time

import torch

from benchmarks.common.env import write_meta
from benchmarks.common.encode import out_dir


def reading(label):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    reserved = torch.cuda.memory_reserved()
    return {"label": label, "free": free, "total": total, "reserved": reserved,
            "allocated": torch.cuda.memory_allocated(), "context": total - free - reserved}


def main():
    write_meta(out_dir(), __file__)
    res = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": sys.version}
    if not torch.cuda.is_available():
        print("no cuda")
        return
    p = torch.cuda.get_device_properties(0)
    res["props"] = {k: getattr(p, k) for k in dir(p) if not k.startswith("_")
                    and isinstance(getattr(p, k), (int, float, str, bool))}
    res["name"] = torch.cuda.get_device_name(0)
    readings = []
    torch.cuda.init()
    readings.append(reading("after_init"))
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    readings.append(reading("after_randn"))
    y = x @ x
    readings.append(reading("after_first_bf16_mm"))
    xf = x.float()
    yf = xf @ xf
    readings.append(reading("after_fp32_mm"))
    q = torch.randn(1, 8, 256, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    o.sum().backward()
    lin = torch.nn.Linear(256, 256, device="cuda")
    opt = torch.optim.AdamW(lin.parameters())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(lin(torch.randn(8, 256, device="cuda")).float(), torch.zeros(8, dtype=torch.long, device="cuda"))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
    opt.step()
    readings.append(reading("after_sdpa_adamw_ce"))
    res["readings"] = readings
    # Ceilings: device-to-device copy and a large bf16 GEMM (random data).
    a = torch.randn(1 << 30, device="cuda", dtype=torch.float32)  # 4 GiB
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    res["copy_4gib_read_plus_write_bytes_per_s"] = 2 * a.numel() * 4 * 10 / (s.elapsed_time(e) / 1e3)
    del a, b
    m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        m @ m
    s.record()
    for _ in range(10):
        m @ m
    e.record()
    torch.cuda.synchronize()
    res["gemm_8192_bf16_flops_per_s"] = 2 * 8192**3 * 10 / (s.elapsed_time(e) / 1e3)
    try:
        res["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,clocks.sm,power.limit,driver_version,pci.bus_id",
             "--format=csv"], capture_output=True, text=True, timeout=20).stdout
    except Exception as ex:  # noqa: BLE001 - informational only
        res["nvidia_smi"] = repr(ex)
    with open(f"{out_dir()}/device.json", "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: res[k] for k in ("name", "copy_4gib_read_plus_write_bytes_per_s", "gemm_8192_bf16_flops_per_s")}))
    for r in readings:
        print(r)


if __name__ == "__main__":
    main()
