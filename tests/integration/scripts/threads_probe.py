"""GPU work issued from two host threads at once, as TorchTitan's DualPipeV runs one microbatch's forward
beside another's backward (dispatch Note [Host threads])."""

import json
import sys
import threading

import torch

sys.setswitchinterval(1e-5)  # switch threads often, so the two threads' ops interleave
weights = [torch.randn(64, 64, device="cuda", requires_grad=True) for _ in range(50)]
x = torch.randn(8, 64, device="cuda")
h = x
for w in weights:
    h = torch.tanh(h @ w)
loss = h.sum()
errors, devices = [], set()


def backward() -> None:
    try:
        loss.backward()
    except Exception as error:  # noqa: BLE001 - reported by the main thread
        errors.append(repr(error))


thread = threading.Thread(target=backward)
thread.start()
with torch.no_grad():
    for _ in range(20):
        y = x
        for w in weights:
            y = torch.tanh(y @ w)
            devices.add(str(y.device))
thread.join()
print("PROBE", json.dumps({"errors": errors, "devices": sorted(devices),
                           "grads": sum(w.grad is not None for w in weights)}))
