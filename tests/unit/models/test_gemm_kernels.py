"""The measured table of cuBLAS kernel choices, and the host's cost of a kernel's first launch in a process."""

import pytest
from recording_transport import Recording

from phantora.config.run import RankConfig
from phantora.models.compute import ComputeModel, DbEntry, KernelDatabase
from phantora.models.gemm_kernels import GemmKernelTable
from phantora.models.ops import OpCall, TensorMeta
from phantora.runtime.session import Session
from phantora.specs import get_gpu_spec, load_profile

H200_HOST = load_profile("h200").host.value

FAMILY = {"op": "aten.mm", "inputs": [[["*", 64], [64, 1], "bfloat16"], [[64, 32], [32, 1], "bfloat16"]],
          "sizes": [100, 120], "runs": [[100, 0], [105, 1], [111, 0]]}


def table(*families):
    return GemmKernelTable.from_dict({"format": "phantora-gemm-kernels", "version": 1, "gpu": "h200",
                                      "kernels": ["k_a", "k_b"], "families": list(families)})


def rows(m, dtype="bfloat16"):
    return [((m, 64), (64, 1), dtype), ((64, 32), (32, 1), dtype)]


def test_the_kernel_follows_the_runs_over_the_free_size():
    t = table(FAMILY)
    assert [t.kernel("aten.mm", rows(m)) for m in (100, 104, 105, 110, 111, 120)] == \
        ["k_a", "k_a", "k_b", "k_b", "k_a", "k_a"]


def test_unmeasured_problems_have_no_kernel():
    t = table(FAMILY)
    assert t.kernel("aten.mm", rows(99)) is None and t.kernel("aten.mm", rows(121)) is None  # outside the sweep
    assert t.kernel("aten.mm", rows(104, "float32")) is None      # another dtype
    assert t.kernel("aten.bmm", rows(104)) is None                # another op
    transposed = [((104, 64), (1, 104), "bfloat16"), ((64, 32), (32, 1), "bfloat16")]
    assert t.kernel("aten.mm", transposed) is None                # another layout


def test_a_table_whose_runs_do_not_cover_its_sizes_is_refused():
    with pytest.raises(ValueError, match="do not cover"):
        table({**FAMILY, "runs": [[101, 0], [105, 1]]})
    with pytest.raises(ValueError, match="version 1"):
        GemmKernelTable.from_dict({"format": "phantora-kernels", "version": 1})


def test_the_h200_table_knows_the_moe_expert_gemms():
    t = load_profile("h200").gemm_kernels.value
    forward = [((8100, 2048), (2048, 1), "bfloat16"), ((2048, 4096), (4096, 1), "bfloat16")]
    assert t.kernel("aten.mm", forward).startswith("nvjet_sm90")
    assert t.kernel("aten.mm", [(s, st, "float32") for s, st, _ in forward]) is None
    assert len(load_profile("a100").gemm_kernels.value) == 0


def mm(m):
    a = TensorMeta((m, 2048), "bfloat16", (2048, 1))
    b = TensorMeta((2048, 4096), "bfloat16", (4096, 1))
    return OpCall("aten.mm.default", (a, b), (), (TensorMeta((m, 4096), "bfloat16", (4096, 1)),))


def test_a_process_pays_each_kernels_first_launch_once():
    # one rank on the measured hosts: the host constants as they are
    session = Session(RankConfig(gpu="h200", trace=False, use_kernel_database=False, host_contention="h200-vm"),
                      Recording(), flush_interval_s=None)
    kernel = {m: session.gemm_kernels.kernel("aten.mm", session.host.gemm_problem(mm(m))[2]) for m in range(7600, 8801)}
    first = 8100
    same = next(m for m in kernel if m != first and kernel[m] == kernel[first])
    other = next(m for m in kernel if kernel[m] != kernel[first])
    launch, select, load = session.host.op_ns(mm(first)), H200_HOST.gemm_select_ns, H200_HOST.gemm_kernel_load_ns

    def cost(m):
        before = session.now_ns()
        session.launch_kernel(mm(m), (0, 0))
        return session.now_ns() - before

    assert cost(first) == launch + select + load   # a new problem, a new kernel
    assert cost(first) == launch                   # seen both
    assert cost(same) == launch + select           # a new problem, a kernel launched before
    assert cost(other) == launch + select + load
    assert session.stats.gemm_kernel_loads == 2 and session.stats.gemm_problems == 3


def test_kernels_a_profile_recorded_count_where_the_table_has_none():
    """`phantora profile` records each op's kernels; a GEMM outside the table pays the first launch of those."""
    fp32 = [OpCall("aten.mm.default", (TensorMeta((m, 64), "float32", (64, 1)), TensorMeta((64, 32), "float32", (32, 1))),
                   (), (TensorMeta((m, 32), "float32", (32, 1)),)) for m in (100, 101, 102)]
    db = KernelDatabase("h200")
    db.add(fp32[0], DbEntry(9000, 2, 5, "micro_cold", "aten.mm.default", ("gemm_a", "Memset (Device)")))
    db.add(fp32[1], DbEntry(9000, 1, 5, "micro_cold", "aten.mm.default", ("gemm_a",)))
    db.add(fp32[2], DbEntry(9000, 1, 5, "micro_cold", "aten.mm.default"))  # measured without names
    gpu = get_gpu_spec("h200")
    session = Session(RankConfig(gpu="h200", trace=False), Recording(), flush_interval_s=None, gpu=gpu,
                      compute=ComputeModel(gpu, db, load_profile("h200").calibration.value))
    for op in fp32:
        session.launch_kernel(op, (0, 0))
    assert session.stats.gemm_kernel_loads == 1 and session.stats.gemm_problems == 3


def test_a_databases_kernel_names_survive_saving_and_loading(tmp_path):
    db = KernelDatabase("h200")
    named = DbEntry(9000, 2, 5, "micro_cold", "aten.mm.default", ("gemm_a", "Memset (Device)"))
    db.add(mm(8100), named)
    db.add(mm(8101), DbEntry(9000, 1, 5, "micro_cold", "aten.mm.default"))
    db.save(tmp_path / "db.jsonl")
    lines = (tmp_path / "db.jsonl").read_text().splitlines()[1:]
    assert sum('"kernels":' in line for line in lines) == 1  # an entry without names keeps the old line
    assert KernelDatabase.load(tmp_path / "db.jsonl").entries == db.entries
