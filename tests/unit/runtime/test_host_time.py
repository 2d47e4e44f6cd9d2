"""`--host-time measured`: the timer's accounting, the host model's remaining share, the config, the
session's entries (runtime/host_time.py Note [Measured host time])."""

import threading

import pytest

from phantora.config.run import RankConfig
from phantora.models.host import HostModel
from phantora.models.measured_host import MeasuredHostModel, host_model_for
from phantora.models.ops import OpCall, TensorMeta
from phantora.protocol.records import KernelRecord
from phantora.runtime.host_time import HostTimer, scaled_ns
from phantora.runtime.session import Session
from phantora.specs import load_profile
from recording_transport import Recording

C = load_profile("h200").host.value


class FakeCpu:
    """A CPU clock per thread that only moves when told."""

    def __init__(self):
        self.ns = {}

    def __call__(self):
        return self.ns.get(threading.get_ident(), 0)

    def spend(self, ns):
        self.ns[threading.get_ident()] = self() + ns


def timer(scale=1.0):
    cpu, charged = FakeCpu(), []
    return HostTimer(charged.append, scale=scale, cpu_ns=cpu), cpu, charged


def test_only_time_between_exit_and_next_entry_is_charged():
    t, cpu, charged = timer()
    t.start()
    cpu.spend(100)          # the program's own code
    t.enter()
    cpu.spend(5000)         # Phantora's work
    t.enter()               # nested entry: nothing
    cpu.spend(7000)
    t.exit()
    t.exit()
    cpu.spend(30)
    t.enter()
    t.exit()
    assert charged == [100, 30] and t.charged_ns == 130


def test_scale_rounds_and_overhead_is_subtracted():
    assert scaled_ns(1000, 0.5) == 500 and scaled_ns(3, 0.5) == 2 and scaled_ns(-5, 1.0) == 0
    t, cpu, charged = timer(scale=2.0)
    t.entry_overhead_ns = 40
    t.start()
    cpu.spend(100)
    t.enter()
    t.exit()
    cpu.spend(10)           # less than one entry's overhead: nothing
    t.enter()
    t.exit()
    assert charged == [120]


def test_a_thread_is_measured_from_its_first_exit_and_stop_ends_measuring():
    t, cpu, charged = timer()
    cpu.spend(10_000)       # before anything: not attributed
    t.enter()
    t.exit()
    assert charged == []
    seen = []

    def other():            # its own clock and depth
        cpu.spend(500)
        t.enter()
        cpu.spend(1)
        t.exit()
        cpu.spend(70)
        t.enter()
        seen.append(list(charged))
        t.exit()

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert seen == [[70]]
    cpu.spend(200)
    t.stop()                # charges the tail, then nothing more
    cpu.spend(300)
    t.enter()
    t.exit()
    assert charged == [70, 200]


def test_wrap_makes_an_entry_and_exits_on_error():
    t, cpu, charged = timer()
    t.start()

    def work(x):
        cpu.spend(1000)
        if x < 0:
            raise ValueError(x)
        return x

    entry = t.wrap(work)
    cpu.spend(5)
    assert entry(3) == 3
    cpu.spend(6)
    with pytest.raises(ValueError):
        entry(-1)
    cpu.spend(7)
    entry(1)
    assert charged == [5, 6, 7]


def test_calibrate_takes_the_median_gap_and_charges_nothing():
    t, cpu, charged = timer(scale=3.0)
    gaps = iter([50, 40, 40, 9000, 45] * 4)

    def probe():
        cpu.spend(next(gaps))  # the part of a round trip outside the entry
        t.enter()
        cpu.spend(100)
        t.exit()

    assert t.calibrate(probe, repeats=20) == 45
    assert charged == [] and t.charged_ns == 0 and t.scale == 3.0
    cpu.spend(145)
    t.enter()
    t.exit()
    assert charged == [300]


# -- the host model's share ------------------------------------------------------------------
def meta(*shape):
    stride, acc = [], 1
    for d in reversed(shape):
        stride.insert(0, acc)
        acc *= d
    return TensorMeta(tuple(shape), "float32", tuple(stride))


def test_measured_host_model_keeps_launch_costs_and_drops_python_terms():
    m, full = MeasuredHostModel(C), HostModel(C)
    add = OpCall("aten.add.Tensor", (meta(8), meta(8)), (), (meta(8),))
    mm = OpCall("aten.mm.default", (meta(8, 8), meta(8, 8)), (), (meta(8, 8),))
    assert m.op_ns(add) == C.launch_ns + C.alloc_output_ns == full.op_ns(add) - C.framework_ns
    assert m.op_ns(mm) == full.op_ns(mm, backward=True) and not m.pays_framework(add)
    view = OpCall("aten.view.default", (meta(8), (2, 4)), (), (meta(2, 4),))
    assert m.op_ns(view) == C.view_ns and m.sync_ns() == C.sync_ns and m.collective_ns() == C.collective_ns
    assert m.query_ns() == C.query_ns and m.alloc_ns("aten.empty") == C.alloc_ns
    assert (m.module_call_ns(), m.autograd_node_ns(), m.optimizer_step_ns(), m.zero_grad_ns(10), m.grad_norm_ns(),
            m.dataloader_next_ns(), m.dataloader_contention_ns(), m.subclass_op_ns(3)) == (0,) * 8
    assert m.library_calls() == [] and all(m.library_call_ns(name) == 0 for name in full.library_calls())
    # a compiled graph's guards and wrappers run in the process; its generated code's launches do not
    assert m.compiled_call_ns(12) == 0 and m.compiled_launch_ns(mm) == full.compiled_launch_ns(mm) > 0
    assert type(host_model_for("model", C)) is HostModel and type(host_model_for("measured", C)) is MeasuredHostModel


# -- configuration ---------------------------------------------------------------------------
def test_rank_config_host_time():
    default = RankConfig(gpu="h200")
    assert (default.host_time, default.host_time_scale) == ("model", 1.0)
    measured = RankConfig(gpu="h200", host_time="measured", host_time_scale=2)
    assert measured.host_time_scale == 2.0 and isinstance(measured.host_time_scale, float)
    import json
    assert RankConfig(**json.loads(measured.to_env())) == measured
    for bad in (0, -1.0, float("nan"), float("inf"), "2", True):
        with pytest.raises(ValueError, match="host-time-scale"):
            RankConfig(gpu="h200", host_time="measured", host_time_scale=bad)
    with pytest.raises(ValueError, match="--host-time must be"):
        RankConfig(gpu="h200", host_time="wall")
    assert RankConfig(gpu="h200", host_time_scale=0.5).host_time_scale == 0.5  # scales the host model


def test_host_time_scale_scales_the_host_model():
    """In model mode `--host-time-scale` multiplies every constant; measured mode keeps them."""
    assert host_model_for("model", C, 0.5).c.launch_ns == C.launch_ns // 2
    assert host_model_for("model", C, 0.5).c.framework_ns == round(0.5 * C.framework_ns)
    assert host_model_for("measured", C, 0.5).c is C
    session = Session(RankConfig(gpu="h200", host_time_scale=0.5, trace=False, use_kernel_database=False),
                      Recording(), flush_interval_s=None)
    assert session.host.c.gemm_select_ns == C.gemm_select_ns // 2


# -- the session's entries ---------------------------------------------------------------------


def test_session_settles_measured_time_before_stamping_or_reading_the_clock():
    transport = Recording()
    config = RankConfig(gpu="h200", host_time="measured", host_time_scale=0.5, trace=False,
                        use_kernel_database=False, host_contention="h200-vm")  # the op's launch cost as modelled
    session = Session(config, transport, flush_interval_s=None)
    assert isinstance(session.host, MeasuredHostModel)
    cpu = FakeCpu()
    t = session.host_timer
    t._cpu_ns = cpu
    t.start()
    cpu.spend(2_000_000)                    # the program's own code: 1 ms at scale 0.5
    assert session.now_ns() == 1_000_000    # a clock read sees it
    cpu.spend(400_000)
    add = OpCall("aten.add.Tensor", (meta(8), meta(8)), (), (meta(8),))
    session.launch_kernel(add, (0, 0))
    kernel = next(r for r in session.link._pending if isinstance(r, KernelRecord))
    assert kernel.host_ns == 1_200_000 + session.host.op_ns(add)  # settled, then the op's launch cost
    assert t.charged_ns == 1_200_000
    cpu.spend(10)
    session.link.record_event(session.link.new_event_id(), session.stream_id((0, 0)))  # link calls settle too
    assert session.now_ns() == kernel.host_ns + 5


def test_model_mode_session_has_no_timer():
    session = Session(RankConfig(gpu="h200", trace=False, use_kernel_database=False), Recording(),
                      flush_interval_s=None)
    assert session.host_timer is None and type(session.host) is HostModel
    assert "now_ns" not in vars(session) and "advance_host" not in vars(session.link)
