"""What a test does to the run (exit, interrupt, time) is told as plain pytest would tell it."""

from __future__ import annotations

import pytest
from hx_support import run

ENDINGS = """
    import pytest, sys

    def test_first():
        {body}

    def test_second():
        pass
"""


@pytest.mark.parametrize("level", ["none", "engine", "test"])
def test_pytest_exit_ends_the_run_without_blaming_the_next_test(
    suite: pytest.Pytester, level: str
) -> None:
    suite.makepyfile(test_end=ENDINGS.format(body='pytest.exit("enough", returncode=3)'))
    result = run(suite, "--isolate", level)
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*Exit: enough*"])
    result.stdout.no_fnmatch_line("*Crash*")
    result.stdout.no_fnmatch_line("*test_second*")


@pytest.mark.parametrize("level", ["none", "engine"])
def test_sys_exit_fails_only_its_test(suite: pytest.Pytester, level: str) -> None:
    suite.makepyfile(test_end=ENDINGS.format(body="sys.exit(4)"))
    result = run(suite, "--isolate", level)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*SystemExit: 4*"])
    result.stdout.no_fnmatch_line("*Crash*")


@pytest.mark.parametrize("level", ["none", "engine"])
def test_keyboard_interrupt_stops_the_run(suite: pytest.Pytester, level: str) -> None:
    suite.makepyfile(test_end=ENDINGS.format(body="raise KeyboardInterrupt"))
    result = run(suite, "--isolate", level)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*", "*test_end.py:4*"])
    result.stdout.no_fnmatch_line("*Crash*")


SLOW = """
    import time, pytest

    @pytest.mark.timeout(0.5)
    def test_marked():
        time.sleep(120)

    def test_by_option():
        time.sleep(120)

    @pytest.fixture
    def slow_setup():
        time.sleep(120)

    @pytest.mark.timeout(0.5)
    def test_in_setup(slow_setup):
        pass

    def test_fast():
        pass
"""


def test_timeouts_are_enforced_in_process(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_slow=SLOW)
    result = run(suite, "--isolate", "none", "--harness-timeout", "0.5")
    result.assert_outcomes(passed=1, failed=2, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "*Timeout: test_slow.py::test_marked ran longer than 0.5 s (in-process*",
            "*Timeout: test_slow.py::test_by_option ran longer than 0.5 s*",
            "*Timeout: test_slow.py::test_in_setup ran longer than 0.5 s*",
            "*test_slow.py*in test_marked*",
        ]
    )
    # each sleep was cut short: the three would take 360 s (the bound leaves a loaded
    # machine room for the run's own start-up)
    assert result.duration < 120


def test_isolate_none_marker_is_timed_too(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_slow="""
        import time, pytest

        @pytest.mark.isolate("none")
        @pytest.mark.timeout(0.5)
        def test_marked():
            time.sleep(30)
    """
    )
    result = run(suite)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout: test_slow.py::test_marked ran longer than 0.5 s*"])


def test_default_timeout_is_documented_and_zero_turns_it_off(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_x="def test_x(): pass")
    result = run(suite)
    result.stdout.fnmatch_lines(["tandem-harness: *timeout=300s*"])
    result = run(suite, "--harness-timeout", "0")
    result.stdout.fnmatch_lines(["tandem-harness: *timeout=none*"])
    help_text = run(suite, "--help").stdout.str()
    assert "default 300; 0 = none" in help_text


SUBTESTS = """
    import unittest

    def test_numbers(subtests):
        for i in range(4):
            with subtests.test(i=i):
                assert i != 2

    class TestLetters(unittest.TestCase):
        def test_letters(self):
            for c in "abc":
                with self.subTest(c=c):
                    self.assertNotEqual(c, "b")
"""


@pytest.mark.parametrize("level", ["none", "engine"])
def test_subtests_are_told_once_as_plain_pytest_tells_them(
    suite: pytest.Pytester, level: str
) -> None:
    """Each subtest's own report reaches the terminal and the counts once, from the parent
    (a child logs none itself, and sends the report its plugin logged, not an inner one); a
    test whose ``subtests`` failed fails, as it does in plain pytest (a unittest one does not).
    """
    suite.makepyfile(test_sub=SUBTESTS)
    result = run(suite, "--isolate", level, "-rA")
    assert result.parseoutcomes() == {"failed": 3, "passed": 1}
    result.stdout.fnmatch_lines_random(
        [
            "SUBFAILED test_sub.py::test_numbers - assert 2 != 2",
            "FAILED test_sub.py::test_numbers - contains 1 failed subtest",
            "SUBFAILED test_sub.py::TestLetters::test_letters - *",
            "PASSED test_sub.py::TestLetters::test_letters",
        ]
    )
    assert result.stdout.str().count("SUBFAILED") == 2  # told once: no child prints its own


RELAYED = """
    import warnings

    def pytest_runtest_logreport(report):
        if report.when == "call":
            warnings.warn(f"relayed {{report.nodeid.split('::')[-1]}}", UserWarning)
    {protocol}
"""
OWN_PROTOCOL = """
    import pytest

    calls = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        calls.append(item.name)
        return (yield)

    def pytest_sessionfinish(session):
        print("protocol called for", sorted(calls))
"""


@pytest.mark.parametrize("protocol", ["", OWN_PROTOCOL], ids=["direct", "own-protocol-hook"])
def test_the_parents_loop_keeps_what_pytests_protocol_hook_gives(
    suite: pytest.Pytester, protocol: str
) -> None:
    """The parent logs isolated tests without calling ``pytest_runtest_protocol`` only where
    nothing but pytest implements it: a conftest's own implementation is still called for
    each test (a wrapper: the harness's own implementation runs the test), and a
    warning the parent raises while it logs a report is in the summary
    either way, as is the tests' own."""
    suite.makeconftest(RELAYED.format(protocol=protocol))
    suite.makepyfile(
        test_a="""
        import warnings

        def test_one():
            warnings.warn("from the test", UserWarning)

        def test_two():
            pass
        """
    )
    result = run(suite, "--isolate", "engine", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*warnings summary*"])
    result.stdout.fnmatch_lines(["*from the test*"])
    result.stdout.fnmatch_lines(["*relayed test_one*"])
    result.stdout.fnmatch_lines(["*relayed test_two*"])
    if protocol:
        result.stdout.fnmatch_lines(["*protocol called for ?'test_one', 'test_two'?*"])


def test_a_collection_error_stops_the_run_before_the_parents_loop(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_a="def test_one(): pass", test_b="import no_such_module_here")
    result = run(suite, "--isolate", "engine")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*1 error during collection*"])
    result.stdout.no_fnmatch_line("*test_one PASSED*")
