"""A child sends its tests' reports in batches: nothing is lost or misattributed by that.

Until a batch is sent it is in the child's journal, so a child that dies or hangs in the
middle of one still tells each finished test's own outcome, and the crash or the timeout
is told on the test that was running.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hx_support import ini, run

from tandem.harness.isolation import wire
from tandem.harness.isolation.child import Channel
from tandem.harness.isolation.journal import journal
from tandem.harness.isolation.leftovers import gather, running
from tandem.harness.isolation.messages import Done, Report, Started
from tandem.harness.isolation.pool import Child


def _report(nodeid: str, when: str, outcome: str = "passed") -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("x.py", 0, nodeid), {}, outcome, None, when)  # type: ignore[arg-type]


def _run_test(channel: Channel, nodeid: str, outcome: str = "passed") -> None:
    channel.started(nodeid)
    for when in ("setup", "call", "teardown"):
        channel.report(None, _report(nodeid, when, outcome if when == "call" else "passed"))  # type: ignore[arg-type]
    channel.done(nodeid)


def _kinds(messages: list) -> list[str]:
    return [f"{type(m).__name__}:{getattr(m, 'nodeid', '')}" for m in messages]


@pytest.fixture
def pipe() -> tuple[int, int]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_a_batch_not_sent_yet_is_in_the_journal(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    channel = Channel(w, tmp_path, batch=100, linger=100.0)
    _run_test(channel, "t::a")
    _run_test(channel, "t::b", outcome="failed")
    channel.started("t::c")
    channel.report(None, _report("t::c", "setup"))  # type: ignore[arg-type]
    assert not channel.due()
    assert running(tmp_path, os.getpid())[0] == "t::c"
    child = Child(os.getpid(), -1, r, unit=None)
    left = gather(child, tmp_path, "t::a")
    assert left.running == "t::c"
    for name in ("t::a", "t::b"):
        assert _kinds(left.messages[name]) == [f"Report:{name}"] * 3 + [f"Done:{name}"]
    assert _kinds(left.messages["t::c"]) == ["Report:t::c"]
    call = left.messages["t::b"][1]
    assert isinstance(call, Report) and call.whole[1]["outcome"] == "failed"


def test_a_sent_batch_leaves_the_journal_and_is_not_told_twice(
    tmp_path: Path, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    channel = Channel(w, tmp_path, batch=2, linger=100.0)
    _run_test(channel, "t::a")
    _run_test(channel, "t::b")
    assert channel.due()
    # the batch is written, and the child dies before it empties its journal
    wire.write(w, b"".join(channel.frames))
    assert [m for m in journal(tmp_path, os.getpid()) if isinstance(m, Done)]
    child = Child(os.getpid(), -1, r, unit=None)
    left = gather(child, tmp_path, "t::a")
    assert _kinds(left.messages["t::a"]).count("Done:t::a") == 1
    assert left.running is None
    # and once emptied, the journal holds nothing more
    channel.flush()
    assert journal(tmp_path, os.getpid()) == []
    channel.started("t::c")
    assert [type(m) for m in journal(tmp_path, os.getpid())] == [Started]


MANY = """
    import os, pathlib, time, pytest

    @pytest.mark.parametrize("i", range(12))
    def test_before(i):
        pass

    def test_fails_on_its_own():
        assert False, "its own failure"

    def test_leaks():
        os.environ["LEAKED_BY_THIS_ONE"] = "1"

    def test_crash():
        print("last words")
        {body}

    @pytest.mark.parametrize("i", range(5))
    def test_after(i):
        assert "LEAKED_BY_THIS_ONE" not in os.environ
"""


def test_a_crash_mid_batch_fails_only_the_running_test(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_many=MANY.format(body="os._exit(7)"))
    result = run(suite, "-v", "--isolate", "engine")
    result.assert_outcomes(passed=18, failed=2, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "*test_before[[]11[]] PASSED*",
            "*test_fails_on_its_own FAILED*",
            "*test_crash FAILED*",
            "*test_after[[]4[]] PASSED*",
            "*its own failure*",
            "*ERROR at teardown of test_leaks*",
            "*env var LEAKED_BY_THIS_ONE was added*",
            "*Crash: the child process*exited with code 7 while running*test_crash*",
        ]
    )
    result.stdout.no_fnmatch_line("*while running*test_before*")


def test_a_later_test_of_a_batch_that_hangs_is_the_one_timed_out(suite: pytest.Pytester) -> None:
    ini(suite, "harness_timeout = 60")
    suite.makepyfile(
        test_many=MANY.format(body="pytest.skip('not this one')")
        + """
    @pytest.mark.timeout(0.5)
    def test_hangs():
        print("sleeping")
        time.sleep(120)

    def test_last():
        pass
"""
    )
    result = run(suite, "-v", "--isolate", "engine")
    result.assert_outcomes(passed=19, failed=2, errors=1, skipped=1)
    result.stdout.fnmatch_lines_random(
        [
            "*test_before[[]0[]] PASSED*",
            "*test_after[[]4[]] PASSED*",
            "*test_hangs FAILED*",
            "*test_last PASSED*",
            "*Timeout: test_many.py::test_hangs ran longer than 0.5 s*",
        ]
    )
    result.stdout.no_fnmatch_line("*Timeout: test_many.py::test_[!h]*")


class _Reducing(pytest.TestReport):
    """A plugin's report that pickles through a reduce of its own."""

    def __reduce__(self) -> tuple:
        return (_rebuilt, (self.nodeid, self.when, self.outcome))


def _rebuilt(nodeid: str, when: str, outcome: str) -> _Reducing:
    report = _Reducing(nodeid, ("x.py", 0, nodeid), {}, outcome, None, when)  # type: ignore[arg-type]
    report.rebuilt = True  # type: ignore[attr-defined]
    return report


@pytest.mark.parametrize("cls", [pytest.TestReport, _Reducing])
def test_a_report_crosses_whole_whatever_its_class(cls: type) -> None:
    """A plain report crosses as its class and state (no generic reduce); one whose class
    pickles in its own way crosses through that way."""
    from tandem.harness.isolation.reports import load_report, report_frame

    report = cls("t::a", ("x.py", 3, "a"), {"a": 1}, "failed", "boom", "call", [("o", "x")], 0.5)
    report.user_properties.append(("engine", "v0"))
    (message,) = wire.parse(report_frame(None, report) + wire.END)  # type: ignore[arg-type]
    back = load_report(None, message)  # type: ignore[arg-type]
    assert type(back) is cls
    if cls is _Reducing:
        assert back.rebuilt and (back.nodeid, back.when, back.outcome) == ("t::a", "call", "failed")
    else:
        assert back.__dict__ == report.__dict__
        assert back.longreprtext == "boom" and back.failed and back.sections == [("o", "x")]


def test_a_report_that_does_not_pickle_crosses_as_plain_data(pytestconfig: pytest.Config) -> None:
    """A plugin's attribute that pickle refuses: the report crosses through pytest's own
    serialisation, and the parent still gets its outcome and its id."""
    from tandem.harness.isolation.reports import load_report, report_frame

    report = _report("t::a", "call", "failed")
    report.handle = lambda: None  # type: ignore[attr-defined]
    (message,) = wire.parse(report_frame(pytestconfig, report) + wire.END)
    assert isinstance(message, Report) and message.whole is None and message.data
    back = load_report(pytestconfig, message)
    assert back.failed and back.nodeid == "t::a" and back.when == "call"
