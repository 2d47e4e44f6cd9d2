"""benchmarks/fit_all.py: every fit in dependency order, rerun until nothing moves, and the shipped constants a fixed
point of the fits that need no simulation."""

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import fit_all

REPO = Path(__file__).resolve().parents[2]


def rounds_of(moves: list[bool]):
    """A round function that moves constants as `moves` says, and the rounds it was called."""
    calls = []

    def one_round() -> bool:
        calls.append(len(calls) + 1)
        return moves[len(calls) - 1]
    return one_round, calls


def test_until_fixed_stops_at_the_first_round_that_moves_nothing():
    one_round, calls = rounds_of([True, True, False, True])
    assert fit_all.rounds_to_fixed_point(one_round, max_rounds=4) == 3
    assert calls == [1, 2, 3]


def test_until_fixed_gives_up_after_max_rounds():
    one_round, calls = rounds_of([True] * 5)
    assert fit_all.rounds_to_fixed_point(one_round, max_rounds=3) is None
    assert calls == [1, 2, 3]


def test_fits_that_read_simulations_come_after_what_they_simulate_with():
    order = [fit.name for fit in fit_all.FITS]
    assert order.index("kernels") < order.index("sharing") and order.index("collectives") < order.index("sharing")
    # the compiled-graph fit simulates with the context terms and reads the mean contended host's slowdown
    assert order.index("host_context") < order.index("host_compiled") > order.index("host_contention")
    # both write library_call_ns, each keeping the entries of the other
    assert order.index("host_fsdp") < order.index("host_fsdp1")
    assert {fit.name for fit in fit_all.FITS if fit.simulates} == {"sharing", "host_dtensor", "host_fsdp", "host_fsdp1",
                                                                    "host_moe", "host_compiled"}


@pytest.mark.parametrize("argv, message", [(["--until-fixed", "--dry-run"], "cannot be a --dry-run"),
                                           (["--only", "kernels,nonsense"], "unknown fit(s) nonsense")])
def test_contradictory_or_unknown_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        fit_all.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_shipped_constants_are_a_fixed_point_of_the_fits_that_need_no_simulation():
    """Two quick fits that read measurements only give what ships (the others take from ten seconds to minutes
    each: `python -m benchmarks.fit_all --check` checks them all)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.fit_all", "--check", "--no-simulation",
                           "--only", "host_context,power"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for model in ("host", "power"):
        assert f"specs/h200/{model}.json: unchanged" in done.stdout
