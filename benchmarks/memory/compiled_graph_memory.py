"""Peak memory of compiled graphs as Inductor's generated code allocates and frees them: a kernel that writes its
result in place of a buffer at that buffer's last use, and a backward graph that frees each saved activation at its
last use. Prints `MEMORY {json}`: MiB allocated at the peak of each call above what was allocated before it.

On a GPU (data/h200/memory/compiled_graphs/):  python benchmarks/memory/compiled_graph_memory.py
Simulated (tests/integration/test_compiled_steps.py):  phantora run --gpu h200 benchmarks/memory/compiled_graph_memory.py
"""

import json

import torch

MiB = 1 << 20
N = 4096  # a [4096, 4096] bf16 matrix: 32 MiB


def scaled_relu(x, w):
    return torch.relu(x @ w) * 2  # the GEMM's result dies at the pointwise kernel, which writes over it


def mlp(x, w1, w2, w3):
    return torch.relu(torch.relu(torch.relu(x @ w1) @ w2) @ w3).sum()


def peak_above(run) -> float:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = run()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MiB, result


def main():
    make = lambda grad=False: torch.randn(N, N, device="cuda", dtype=torch.bfloat16, requires_grad=grad)  # noqa: E731
    x, w = make(), make()
    compiled = torch.compile(scaled_relu)
    compiled(x, w)  # compiles
    in_place, y = peak_above(lambda: compiled(x, w))
    del y
    ws = [make(grad=True) for _ in range(3)]
    train = torch.compile(mlp)
    train(x, *ws).backward()  # compiles both graphs
    for p in ws:
        p.grad = None
    loss = train(x, *ws)
    backward, _ = peak_above(lambda: loss.backward())
    print("MEMORY " + json.dumps({"in_place_mib": in_place, "backward_mib": backward}))


if __name__ == "__main__":
    main()
