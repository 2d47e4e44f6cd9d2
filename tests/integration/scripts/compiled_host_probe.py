"""Host time of one call of a compiled graph with no autograd (models/host.py `compiled_call_ns`,
`compiled_input_ns`, `compiled_launch_ns`); prints `COMPILED_HOST {json}`."""

import json
import time

import torch


@torch.compile
def scaled_sum(x, y):
    return (x.sin() * y).sum(dim=0), (x + y).amax(dim=1)


def main():
    x = torch.randn(64, 256, device="cuda")
    y = torch.randn(64, 256, device="cuda")
    with torch.no_grad():
        for _ in range(3):  # the first call compiles
            scaled_sum(x, y)
        t0 = time.perf_counter()
        scaled_sum(x, y)
        took_ns = round((time.perf_counter() - t0) * 1e9)
    print("COMPILED_HOST " + json.dumps({"call_ns": took_ns, "inputs": 2}))


if __name__ == "__main__":
    main()
