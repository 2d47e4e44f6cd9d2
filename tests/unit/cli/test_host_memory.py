"""A job whose rank processes would not fit in the host's memory is refused before any rank starts."""

import pytest

from phantora.cli.launch import RANK_HOST_BYTES, LaunchError, available_host_bytes, refuse_what_cannot_fit


def test_a_job_that_does_not_fit_is_refused_with_the_estimate():
    with pytest.raises(LaunchError, match=r"64 rank processes need at least 15\.6 GiB .* 4\.0 GiB available"):
        refuse_what_cannot_fit(64, 4 * 2**30)
    refuse_what_cannot_fit(16, 16 * RANK_HOST_BYTES)  # fits exactly
    refuse_what_cannot_fit(10**6, None)  # nothing known, nothing refused


def test_available_memory_is_the_kernels_estimate(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n")
    assert available_host_bytes(meminfo) == 8000000 * 1024
    assert available_host_bytes(tmp_path / "missing") is None
    assert available_host_bytes() is None or available_host_bytes() > 0
