"""`--host-time measured` charges the script's own CPU time between GPU ops; the default host model does not
(runtime/host_time.py Note [Measured host time]); `--host-time-scale` scales either."""

from conftest import SCRIPTS

from phantora.specs import load_profile

C = load_profile("h200").host.value
MEAN_HOST = ("--host-contention", "h200-vm")  # one rank on the measured hosts: the constants as they are


def test_measured_host_time_charges_a_python_loop_and_the_model_does_not(phantora):
    model = phantora(str(SCRIPTS / "host_time_probe.py"), extra=MEAN_HOST)
    assert model.code == 0, model.stderr
    took = model.tagged_json("HOSTTIME")
    assert took["loop_ns"] == 0  # no op, no modelled cost: the loop is invisible to the host model
    assert took["add_ns"] == C.launch_ns + C.framework_ns
    assert model.summary["host_time"] == {"mode": "model", "deterministic": True, "scale": 1.0, "contention": "h200-vm"}
    assert "host model (deterministic)" in model.stderr

    faster = phantora(str(SCRIPTS / "host_time_probe.py"), extra=(*MEAN_HOST, "--host-time-scale", "0.5"))
    assert faster.code == 0, faster.stderr
    assert faster.tagged_json("HOSTTIME")["add_ns"] == C.scaled(0.5).launch_ns + C.scaled(0.5).framework_ns
    assert faster.summary["host_time"]["scale"] == 0.5 and "constants x0.5" in faster.stderr

    measured = phantora(str(SCRIPTS / "host_time_probe.py"), extra=(*MEAN_HOST, "--host-time", "measured",
                                                                     "--host-time-scale", "2"))
    assert measured.code == 0, measured.stderr
    took = measured.tagged_json("HOSTTIME")
    cpu = took["loop_cpu_ns"]
    assert cpu > 1_000_000
    # the loop's CPU time (read inside the measured stretch) times the scale, less at most a few µs of
    # calibrated entry overhead, plus the clock reads around it
    assert 2 * (cpu - 50_000) <= took["loop_ns"] <= 2 * (cpu + 500_000)
    assert took["add_ns"] >= C.launch_ns  # the op's modelled launch, without framework_ns, plus what was measured
    host = measured.summary["host_time"]
    assert host["mode"] == "measured" and not host["deterministic"] and host["scale"] == 2.0
    assert host["measured_s"] * 1e9 >= took["loop_ns"]
    assert "measured CPU time x2" in measured.stderr


def test_the_default_host_is_a_dedicated_one(phantora):
    """Unless told otherwise, the ranks' hosts are dedicated servers of the measured CPU class: faster than the
    mean of the contended VMs the constants were measured on (models/host_contention.py)."""
    dedicated = phantora(str(SCRIPTS / "host_time_probe.py"))
    assert dedicated.code == 0, dedicated.stderr
    assert dedicated.summary["host_time"]["contention"] == "none"
    mean_factor = load_profile("h200").host_contention.value.mean_factor()
    took = dedicated.tagged_json("HOSTTIME")["add_ns"]
    assert abs(took - (C.launch_ns + C.framework_ns) / mean_factor) <= 1
