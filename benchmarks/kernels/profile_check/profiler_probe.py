"""One bf16 4096^3 mm measured three ways (run by run_check.sh): the profiler timer, CUDA events, and the
raw profiler events of one tagged call, so a broken kernel attribution can be diagnosed from the log."""

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from phantora.models.ops import OpCall, TensorMeta
from phantora.profiler.measure import TAG, MeasureConfig, Measurer

a = TensorMeta((4096, 4096), "bfloat16", (4096, 1))
mm = OpCall("aten.mm.default", (a, a), (), (a,))
for timer in ("profiler", "events"):
    got = []
    Measurer(MeasureConfig(timer=timer)).measure([mm], lambda i, m, r: got.append((m, r)))
    print(timer, got)
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    with record_function(f"{TAG}0|0"):
        torch.mm(x, x)
    torch.cuda.synchronize()
for e in prof.events():
    print(repr(e.name)[:60], e.device_type, [(k.name[:40], round(k.duration, 2)) for k in e.kernels],
          [c.name for c in e.cpu_children][:4])
