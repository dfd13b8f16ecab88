"""Start methods, seeds and the polluter hunt: each says what it does and does it."""

from __future__ import annotations

import re

import pytest
from hx_support import run

CRASH = """
    import os, sys

    def test_crash():
        print("last words on stdout")
        print("last words on stderr", file=sys.stderr)
        sys.stdout.flush()
        os._exit(7)

    def test_after():
        pass
"""


def test_spawn_crash_report_has_the_childs_output(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_crash=CRASH)
    result = run(suite, "--harness-start", "spawn")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            "*Crash: the child process (pid *) exited with code 7 while running*",
            "*last words on stdout*",
            "*last words on stderr*",
        ]
    )


def test_spawn_timeout_report_has_the_childs_output(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_slow="""
        import sys, time

        def test_slow():
            print("working on it", flush=True)
            time.sleep(60)
    """
    )
    result = run(suite, "--harness-start", "spawn", "--harness-timeout", "3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout: test_slow.py::test_slow*", "*working on it*"])


SEEDS = """
    import random

    def test_record():
        with open("seen.txt", "a") as f:
            f.write(f"{random.random()!r}\\n")
"""


def _header_seed(result: pytest.RunResult) -> int:
    match = re.search(r"tandem-harness: .*seed=(\d+)", result.stdout.str())
    assert match, result.stdout.str()
    return int(match.group(1))


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_header_seed_is_the_childrens_seed(suite: pytest.Pytester, start: str) -> None:
    suite.makepyfile(test_seed=SEEDS)
    result = run(suite, "--harness-start", start)
    result.assert_outcomes(passed=1)
    seed = _header_seed(result)
    (suite.path / "seen.txt").rename(suite.path / "first.txt")
    run(suite, "--harness-seed", str(seed), "--isolate", "none").assert_outcomes(passed=1)
    assert (suite.path / "first.txt").read_text() == (suite.path / "seen.txt").read_text()


def test_harness_seed_wins_over_pytest_randomly(suite: pytest.Pytester) -> None:
    pytest.importorskip("pytest_randomly")
    suite.makepyfile(test_seed=SEEDS)
    quiet = ("-p", "no:cacheprovider", "-p", "randomly")
    first = suite.runpytest_subprocess(*quiet, "--harness-seed", "1234")
    first.stdout.fnmatch_lines_random(
        ["*seed=1234 (--harness-seed, also pytest-randomly's)*", "*randomly-seed=1234*"]
    )
    (suite.path / "seen.txt").rename(suite.path / "first.txt")
    suite.runpytest_subprocess(
        *quiet, "-p", "randomly", "--randomly-seed", "99", "--harness-seed", "1234"
    )
    assert (suite.path / "first.txt").read_text() == (suite.path / "seen.txt").read_text()
    other = suite.runpytest_subprocess(*quiet, "--randomly-seed", "77")
    other.stdout.fnmatch_lines(["*seed=77 (pytest-randomly's --randomly-seed*"])


def test_find_polluter_under_xdist_is_refused_up_front(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    suite.makepyfile(test_x="def test_a(): pass\ndef test_b(): pass")
    result = run(suite, "-n", "2", "--find-polluter", "test_x.py::test_b")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--find-polluter*cannot run under pytest-xdist*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
