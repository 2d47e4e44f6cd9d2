"""20 GEMMs and tanh, eagerly and as a CUDA graph replayed (runtime/cuda_graphs.py); prints `GRAPH {json}`."""

import sys, time, json, torch
x = torch.randn(64, 64, device="cuda")
w = torch.randn(64, 64, device="cuda")
def step(x):
    for _ in range(20):
        x = torch.tanh(x @ w)
    return x
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    step(x)  # warm-up
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = step(x)
def timed(fn, n=10):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n
eager = timed(lambda: step(x))
replayed = timed(g.replay)
print("GRAPH " + json.dumps({"kernels": g.kernel_count(), "eager_us": eager * 1e6, "replay_us": replayed * 1e6,
                              "capturing": torch.cuda.is_current_stream_capturing(), "shape": list(y.shape)}))
