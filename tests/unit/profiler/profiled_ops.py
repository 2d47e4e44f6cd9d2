"""Op calls the profiler tests share: a GEMM, a fused AdamW over lists of tensors, a cast of a strided view."""

from phantora.models.ops import KernelEstimate, OpCall, TensorMeta


def t(shape, dtype="float32", stride=None, device="cuda", offset=0):
    if stride is None:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
    return TensorMeta(tuple(shape), dtype, tuple(stride), device, offset)


def est(ns=1000, source="analytic"):
    return KernelEstimate(ns, 0.0, 0.0, "elementwise", source)


MM = OpCall("aten.mm.default", (t((37, 53)), t((53, 29))), (), (t((37, 29)),))
ADAMW = OpCall("aten._fused_adamw_.default", (*((t((64,)),) * 6 for _ in range(4)), (), (t(()),) * 6),
               (("amsgrad", False), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("lr", 3e-4),
                ("maximize", False), ("weight_decay", 0.1)), ())
TO_BF16 = OpCall("aten._to_copy.default", (t((8, 16), offset=3, stride=(32, 1)),),
                 (("device", "cuda:0"), ("dtype", "bfloat16"), ("layout", "torch.strided")), (t((8, 16), "bfloat16"),))
