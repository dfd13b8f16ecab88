"""Fresh processes: isolation levels, the warm zygote, crashes, timeouts, proof of execution."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hx_support import ini, run

PIDS = """
    import os, pytest

    def record(name):
        with open(os.environ["PID_LOG"], "a") as f:
            f.write(f"{name} {os.getpid()}\\n")

    @pytest.mark.engines("v0", "v1")
    def test_one(engine):
        record(f"one-{engine}")

    @pytest.mark.engines("v0", "v1")
    def test_two(engine):
        record(f"two-{engine}")

    def test_plain():
        record("plain")
"""


def _pids(path: Path) -> dict[str, int]:
    return {
        name: int(pid)
        for name, pid in (line.split() for line in path.read_text().split("\n") if line)
    }


@pytest.mark.parametrize("level", ["none", "engine", "module", "test"])
def test_isolation_levels(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    log = suite.path / "pids.log"
    monkeypatch.setenv("PID_LOG", str(log))
    suite.makepyfile(test_pids=PIDS)
    run(suite, "--isolate", level).assert_outcomes(passed=5)
    pids = _pids(log)
    distinct = len(set(pids.values()))
    if level == "none":
        assert distinct == 1
    elif level == "engine":  # one child per engine, one for engine-less tests
        assert pids["one-v0"] == pids["two-v0"] != pids["one-v1"] == pids["two-v1"]
        assert distinct == 3
    elif level == "module":
        assert distinct == 3
    else:
        assert distinct == 5
    assert os.getpid() not in pids.values()


def test_marker_and_ini_choose_the_level(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = suite.path / "pids.log"
    monkeypatch.setenv("PID_LOG", str(log))
    ini(suite, "harness_isolation = none")
    suite.makepyfile(
        test_pids="""
        import os, pytest
        def record(name):
            with open(os.environ["PID_LOG"], "a") as f:
                f.write(f"{name} {os.getpid()}\\n")

        def test_a():
            record("a")

        @pytest.mark.isolate("test")
        def test_b():
            record("b")

        def test_c():
            record("c")
    """
    )
    run(suite).assert_outcomes(passed=3)
    pids = _pids(log)
    assert pids["a"] == pids["c"] != pids["b"]


def test_zygote_preloads_once(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    log = suite.path / "imports.log"
    monkeypatch.setenv("PID_LOG", str(log))
    suite.makepyfile(
        heavy="""
        import os
        with open(os.environ["PID_LOG"], "a") as f:
            f.write(f"import {os.getpid()}\\n")
        STATE = []
    """
    )
    ini(suite, "harness_preload = heavy\nharness_isolation = test")
    suite.makepyfile(
        test_heavy="""
        import os, sys

        def test_a():
            assert "heavy" in sys.modules
            sys.modules["heavy"].STATE.append(1)

        def test_b():
            assert sys.modules["heavy"].STATE == []  # a fresh child: test_a's append is gone
    """
    )
    run(suite).assert_outcomes(passed=2)
    assert len(log.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("os.kill(os.getpid(), signal.SIGSEGV)", "killed by signal SIGSEGV"),
        ("os.abort()", "killed by signal SIGABRT"),
        ("os._exit(3)", "exited with code 3"),
        ("os._exit(0)", "exited with code 0"),
    ],
)
def test_crash_fails_the_test_and_the_unit_goes_on(
    suite: pytest.Pytester, body: str, expected: str
) -> None:
    suite.makepyfile(
        test_crash=f"""
        import os, signal, pytest

        @pytest.mark.engines("v0")
        def test_before(engine):
            pass

        @pytest.mark.engines("v0")
        def test_crash(engine):
            print("last words")
            {body}

        @pytest.mark.engines("v0")
        def test_after(engine):
            pass
    """
    )
    result = run(suite, "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_crash[[]v0[]] FAILED*",
            "*test_after[[]v0[]] PASSED*",
            f"*Crash: the child process*{expected}*test_crash*",
            "*last stdout*",
            "last words",
        ]
    )


def test_timeout_kills_the_child(suite: pytest.Pytester) -> None:
    ini(suite, "harness_timeout = 30")
    suite.makepyfile(
        test_hang="""
        import pathlib, time, pytest

        @pytest.mark.timeout(0.5)
        def test_hang():
            pathlib.Path("hang-start").write_text(repr(time.monotonic()))
            print("sleeping")
            time.sleep(60)

        def test_after():
            pathlib.Path("after-start").write_text(repr(time.monotonic()))
    """
    )
    result = run(suite, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_after PASSED*",
            "*Timeout: test_hang.py::test_hang ran longer than 0.5 s*",
            "*last stdout*",
            "sleeping",
        ]
    )
    # killed long before its sleep ended: timed between the two tests, not over the whole
    # run, whose start-up alone may take longer than the sleep on a loaded machine
    waited = float((suite.path / "after-start").read_text())
    waited -= float((suite.path / "hang-start").read_text())
    assert waited < 45, waited


def test_timeout_from_the_command_line(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_hang="""
        import time
        def test_hang():
            time.sleep(60)
    """
    )
    result = run(suite, "--harness-timeout", "0.3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ran longer than 0.3 s*"])


def test_bad_options_are_usage_errors(suite: pytest.Pytester) -> None:
    suite.makepyfile("def test_a(): pass")
    result = run(suite, "--isolate", "thread")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--isolate: expected one of none, engine, module, test, got 'thread'*"]
    )
    result = run(suite, "--harness-timeout", "soon")
    result.stderr.fnmatch_lines(["*--harness-timeout: expected a float, got 'soon'*"])


def test_reports_stream_back_as_ordinary_reports(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_r="""
        import pytest

        @pytest.mark.engines("v0", "v1")
        def test_ok(engine):
            print("captured-out")

        def test_fail():
            assert 1 == 2, "boom"

        @pytest.mark.skip(reason="nope")
        def test_skip():
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            raise RuntimeError
    """
    )
    result = run(suite, "-rA", "--durations=3", "--junitxml=out.xml", "--isolate", "test")
    result.assert_outcomes(passed=2, failed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: boom*",
            "*Captured stdout call*",
            "captured-out",
            "*slowest 3 durations*",
        ]
    )
    xml = (suite.path / "out.xml").read_text()
    assert 'name="test_ok[v0]"' in xml and "boom" in xml
    assert '<property name="engine" value="v1"' in xml


def test_spawn_start_method(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    log = suite.path / "pids.log"
    monkeypatch.setenv("PID_LOG", str(log))
    suite.makepyfile(test_pids=PIDS)
    result = run(suite, "--harness-start", "spawn", "--isolate", "engine")
    result.assert_outcomes(passed=5)
    assert len(set(_pids(log).values())) == 3


def test_x_stops_before_the_next_test_even_in_the_child(suite: pytest.Pytester) -> None:
    """The next test of a child is sent ahead of time, except when the run may stop early."""
    suite.makepyfile(
        test_stop="""
        def test_fails():
            assert False

        def test_next():
            open("next-ran.txt", "w").close()
    """
    )
    run(suite, "-x", "-p", "no:randomly").assert_outcomes(failed=1)
    assert not (suite.path / "next-ran.txt").exists()
    run(suite, "-p", "no:randomly").assert_outcomes(failed=1, passed=1)
    assert (suite.path / "next-ran.txt").exists()
