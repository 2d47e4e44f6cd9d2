"""The failure report's traceback: the rank's own, whole."""

from phantora.cli.failure import RankExit, format_failure_report, traceback_tail


def frames(n: int) -> list[str]:
    return [line for i in range(n) for line in (f'  File "train.py", line {i}, in f{i}', f"    f{i + 1}()")]


def test_a_deep_traceback_is_whole():
    lines = ["some output", "Traceback (most recent call last):", *frames(60), "RecursionError: too deep"]
    assert traceback_tail(lines) == "\n".join(lines[1:])


def test_chained_exceptions_are_kept():
    lines = ["noise",
             "Traceback (most recent call last):", *frames(2), "KeyError: 'a'", "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", *frames(2), "RuntimeError: b"]
    assert traceback_tail(lines) == "\n".join(lines[1:])


def test_an_unrelated_earlier_traceback_is_not():
    lines = ["Traceback (most recent call last):", *frames(1), "KeyError: 'a'", "handled, going on",
             "Traceback (most recent call last):", *frames(1), "RuntimeError: b"]
    assert traceback_tail(lines).startswith("Traceback") and "KeyError" not in traceback_tail(lines)


def test_a_signalled_rank_shows_the_stacks_it_dumped():
    dump = ["Fatal Python error: Aborted", "", "Current thread 0x01 (most recent call first):",
            '  File "train.py", line 3 in spin']
    failure = RankExit(rank=1, local_rank=1, pid=42, exit_code=-6, wall_time=0.0, stderr_tail=("x", *dump))
    report = format_failure_report("train.py", failure, [])
    assert "Signal 6 (SIGABRT) received by PID 42" in report and 'line 3 in spin' in report and "x\n" not in report
