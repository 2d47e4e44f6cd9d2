"""More host-cost cases (second H200 call): autograd recording, backward per node, autocast,
module-call overhead. Same method as measure_host.py; writes $OUT/host2.json."""

import json
import os

import torch
import torch.nn as nn

from benchmarks.host.measure_calls import BF16, DEV, DRY, count_ops, sync, timeit
from benchmarks.common.env import write_meta
from benchmarks.common.encode import out_dir


def main():
    write_meta(out_dir(), __file__)
    N = 200 if DRY else 5000
    a = torch.ones(1, device=DEV, requires_grad=True)
    b = torch.ones(1, device=DEV)
    x32 = torch.randn(64, 64, device=DEV)
    ident = nn.Identity()
    lin = nn.Linear(64, 64, bias=False, device=DEV)

    def chain(n):
        def f():
            y = a
            for _ in range(n):
                y = y * b
            y.sum().backward()
        return f

    def chain_fwd(n):
        def f():
            y = a
            for _ in range(n):
                y = y * b
            return y
        return f

    def autocast_mm():
        return torch.mm(x32, x32)

    cases = {
        "mul_requires_grad_1elem": (lambda: a * b, N, False),
        "mul_no_grad_input_1elem": (lambda: b * b, N, False),
        "module_call_identity": (lambda: ident(b), N, False),
        "chain10_fwd": (chain_fwd(10), N // 10, False),
        "chain10_fwd_bwd": (chain(10), N // 10, False),
        "chain100_fwd_bwd": (chain(100), N // 50, False),
        "mm_fp32_64_under_autocast": (autocast_mm, N, True),
        "linear_under_autocast": (lambda: lin(x32), N, True),
    }
    res = {}
    for name, (fn, n, amp) in cases.items():
        with torch.autocast(DEV, dtype=BF16, enabled=amp):
            issue, total = timeit(fn, n)
            ops = count_ops(fn)
        res[name] = {"issue_s": issue, "total_s": total, "n": n, "ops": len(ops), "op_names": sorted(set(ops))}
        print(f"{name:28s} issue {issue*1e6:8.2f} us  total {total*1e6:8.2f} us  ops {len(ops)}", flush=True)
    with open(f"{out_dir()}/host2.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
