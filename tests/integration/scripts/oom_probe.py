"""Allocates --gib GiB in 1 GiB tensors; reports whether it fit."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--gib", type=int, required=True)
p.add_argument("--catch", action="store_true")
a = p.parse_args()
kept = []
try:
    for i in range(a.gib):
        kept.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    print(f"FIT {a.gib} GiB, reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB")
except torch.cuda.OutOfMemoryError as error:
    if not a.catch:
        raise
    print(f"CAUGHT after {len(kept)} GiB: {str(error).splitlines()[0][:80]}")
