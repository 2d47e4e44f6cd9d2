"""Host (CPU) cost model: per-op constants and context terms (their fit on measured steps:
tests/calibration/test_host_fits.py)."""

import dataclasses

from phantora.models.host import HostModel
from phantora.models.ops import OpCall, TensorMeta
from phantora.specs import load_profile

H200_HOST = load_profile("h200").host.value


def t(*shape, dtype="float32"):
    stride, acc = [], 1
    for d in reversed(shape):
        stride.insert(0, acc)
        acc *= d
    return TensorMeta(tuple(shape), dtype, tuple(stride))


def op(name, *args, outputs=()):
    return OpCall(name, args, (), tuple(outputs))


def test_kernel_op_is_launch_plus_framework_plus_allocation():
    c = H200_HOST
    m = HostModel(H200_HOST)
    assert m.op_ns(op("aten.add.Tensor", t(8), t(8), outputs=[t(8)])) == c.launch_ns + c.framework_ns + c.alloc_output_ns
    assert m.op_ns(op("aten.add_.Tensor", t(8), t(8), outputs=[t(8)])) == c.launch_ns + c.framework_ns


def test_a_compiled_graphs_kernels_pay_one_launch_from_its_code_and_an_extern_gemm_its_cublas_extra():
    c = H200_HOST
    m = HostModel(H200_HOST)
    fused = op("inductor.pointwise", t(8), outputs=[t(8)])
    gemm = op("aten.mm.default", t(8, 8), t(8, 8), outputs=[t(8, 8)])
    assert m.compiled_launch_ns(fused) == c.compiled_launch_ns
    assert m.compiled_launch_ns(gemm) - m.compiled_launch_ns(fused) == c.gemm_extra_ns
    assert m.compiled_call_ns(10) == c.compiled_call_ns + 10 * c.compiled_input_ns
    # the generated code calls launchers directly: no Python binding or autograd recording per kernel
    assert m.compiled_launch_ns(fused) != m.op_ns(fused)


def test_views_are_cheaper_than_launches_and_gemms_dearer():
    m = HostModel(H200_HOST)
    view = m.op_ns(op("aten.view.default", t(4, 4), (16,), outputs=[t(16)]))
    add = m.op_ns(op("aten.add.Tensor", t(8), t(8), outputs=[t(8)]))
    mm = m.op_ns(op("aten.mm.default", t(64, 64), t(64, 64), outputs=[t(64, 64)]))
    assert view == H200_HOST.view_ns < add < mm
    assert mm - add == H200_HOST.gemm_extra_ns
    assert m.alloc_ns("aten.empty.memory_format") == H200_HOST.alloc_ns


def test_a_gemm_problem_is_its_shapes_strides_and_dtypes():
    m = HostModel(H200_HOST)
    a = op("aten.mm.default", t(4096, 2048, dtype="bfloat16"), t(2048, 4096, dtype="bfloat16"),
           outputs=[t(4096, 4096, dtype="bfloat16")])
    same = op("aten.mm.default", t(4096, 2048, dtype="bfloat16"), t(2048, 4096, dtype="bfloat16"),
              outputs=[t(4096, 4096, dtype="bfloat16")])
    other_rows = op("aten.mm.default", t(4100, 2048, dtype="bfloat16"), t(2048, 4096, dtype="bfloat16"),
                    outputs=[t(4100, 4096, dtype="bfloat16")])
    assert m.gemm_problem(a) == m.gemm_problem(same) != m.gemm_problem(other_rows)
    assert m.gemm_problem(op("aten.add.Tensor", t(8), t(8), outputs=[t(8)])) is None
    assert m.gemm_select_ns() == H200_HOST.gemm_select_ns


def test_long_sorts_pay_a_radix_pass_per_byte_of_key():
    m = HostModel(H200_HOST)
    def sort(n, dtype="int64"):
        return m.op_ns(op("aten.sort.stable", t(n, dtype=dtype), outputs=[t(n, dtype=dtype), t(n, dtype="int64")]))
    assert sort(16384) - sort(4096) == 8 * H200_HOST.radix_sort_pass_ns  # bitonic up to 4096: no passes
    assert sort(16384, "int32") - sort(4096, "int32") == 4 * H200_HOST.radix_sort_pass_ns
    rows = OpCall("aten.sort.stable", (t(16384, 64),), (("dim", 1), ("stable", True)), (t(16384, 64),))
    assert m.op_ns(rows) == sort(4096)  # 64 elements per sorted row


def test_foreach_cost_grows_linearly_with_the_tensor_list():
    m = HostModel(H200_HOST)
    def fe(n, name="aten._foreach_mul_.Scalar"):
        return m.op_ns(op(name, tuple(t(64) for _ in range(n)), 0.9))
    assert fe(100) - fe(50) == 50 * H200_HOST.foreach_inplace_per_tensor_ns  # one launch takes up to 110
    assert fe(50, "aten._foreach_sqrt.default") - fe(50) == 50 * (
        H200_HOST.foreach_alloc_per_tensor_ns - H200_HOST.foreach_inplace_per_tensor_ns)
    fused = m.op_ns(op("aten._fused_adamw_.default", *(tuple(t(64) for _ in range(10)) for _ in range(4))))
    assert fused == H200_HOST.foreach_base_ns + 10 * H200_HOST.fused_optimizer_per_tensor_ns


def test_foreach_ops_pay_each_further_kernel_launch():
    m = HostModel(H200_HOST)
    def fe(*shapes):
        return m.op_ns(op("aten._foreach_mul_.Scalar", tuple(t(*shape) for shape in shapes), 0.9))
    # multi_tensor_apply: 320 chunks of 65536 elements per launch, at most 110 tensors of a one-list op
    assert fe((64,)) == fe((65536 * 320,)) == H200_HOST.foreach_base_ns + H200_HOST.foreach_inplace_per_tensor_ns
    assert fe((65536 * 320 * 4,)) - fe((65536 * 320,)) == 3 * H200_HOST.foreach_launch_ns
    one_more = H200_HOST.foreach_inplace_per_tensor_ns + H200_HOST.foreach_launch_ns
    assert fe(*[(64,)] * 111) - fe(*[(64,)] * 110) == one_more


def test_constants_are_configurable_and_deterministic():
    m = HostModel(dataclasses.replace(H200_HOST, framework_ns=0))
    x = op("aten.add_.Tensor", t(8), t(8), outputs=[t(8)])
    assert m.op_ns(x) == H200_HOST.launch_ns == m.op_ns(x)


def test_scaled_constants_scale_every_host_time():
    """`--host-time-scale` in model mode: a CPU that takes 0.7x as long for everything."""
    fast = H200_HOST.scaled(0.7)
    assert fast.launch_ns == round(0.7 * H200_HOST.launch_ns) and fast.subclass_op_ns == round(0.7 * H200_HOST.subclass_op_ns)
    assert all(fast.library_call_ns[name] == round(0.7 * ns) for name, ns in H200_HOST.library_call_ns.items())
    mm = op("aten.mm.default", t(64, 64), t(64, 64), outputs=[t(64, 64)])
    assert abs(HostModel(fast).op_ns(mm) - 0.7 * HostModel(H200_HOST).op_ns(mm)) <= 3
    assert H200_HOST.scaled(1.0) is H200_HOST


def test_backward_ops_pay_the_node_not_the_framework():
    c = H200_HOST
    m = HostModel(H200_HOST)
    add = op("aten.add.Tensor", t(8), t(8), outputs=[t(8)])
    assert m.op_ns(add) - m.op_ns(add, backward=True) == c.framework_ns
    assert m.pays_framework(add) and not m.pays_framework(add, backward=True)
    view = op("aten.view.default", t(4, 4), (16,), outputs=[t(16)])
    norm = op("aten._foreach_norm.Scalar", (t(8), t(8)), 2)
    assert m.op_ns(view, backward=True) == m.op_ns(view) == c.view_ns and not m.pays_framework(view)
    assert m.op_ns(norm, backward=True) == m.op_ns(norm) and not m.pays_framework(norm)
    assert m.autograd_node_ns() == c.autograd_node_ns


def test_python_call_costs():
    c = H200_HOST
    m = HostModel(H200_HOST)
    assert m.module_call_ns() == c.module_call_ns
    assert m.zero_grad_ns(100) - m.zero_grad_ns(0) == 100 * c.zero_grad_per_param_ns
    assert m.zero_grad_ns(0) == c.zero_grad_ns
    assert (m.optimizer_step_ns(), m.grad_norm_ns()) == (c.optimizer_step_ns, c.grad_norm_ns)
    assert (m.dataloader_next_ns(), m.dataloader_contention_ns()) == (c.dataloader_next_ns, c.dataloader_contention_ns)


def test_a_subclass_op_from_the_autograd_engine_pays_the_backward_constant():
    """DTensor's own dispatch costs less when the autograd engine issues the op (fit_subclass_ops.py)."""
    c, m = H200_HOST, HostModel(H200_HOST)
    assert c.subclass_backward_op_ns < c.subclass_op_ns
    assert m.subclass_op_ns(1) == c.subclass_op_ns
    assert m.subclass_op_ns(3, backward=True) == c.subclass_backward_op_ns + 2 * c.subclass_op_per_tensor_ns


def test_a_host_tensor_op_costs_its_bytes_and_the_pages_of_a_mapped_output():
    """Note [Tensor ops on the host]: below glibc's mmap threshold the heap's pages are reused; above it every page
    of a new output faults in; a slower host moves bytes more slowly."""
    from phantora.models.host import MMAP_THRESHOLD_BYTES, PAGE_BYTES

    c = H200_HOST
    m = HostModel(c)
    small, large = 8 << 20, 2 * MMAP_THRESHOLD_BYTES
    assert m.cpu_tensor_op_ns(2 * small, [small]) == round(2 * small / c.cpu_bytes_per_s * 1e9)
    assert m.cpu_tensor_op_ns(2 * large, [large]) == round(
        2 * large / c.cpu_bytes_per_s * 1e9 + large // PAGE_BYTES * c.cpu_page_fault_ns)
    assert m.cpu_tensor_op_ns(2 * large) == round(2 * large / c.cpu_bytes_per_s * 1e9)  # in place or pinned
    slower = HostModel(c.scaled(2.0))
    assert abs(slower.cpu_tensor_op_ns(2 * small, [small]) - 2 * m.cpu_tensor_op_ns(2 * small, [small])) <= 2
