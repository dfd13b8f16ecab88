"""Coverage table, seeds, the polluter hunt, xdist, --lf/-k/-x, CUDA fork safety, the wire."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest
from hx_support import ini, run

from tandem.harness.isolation import cuda, wire
from tandem.harness.isolation.messages import Report
from tandem.harness.plugin import coverage

MATRIX = """
    import pytest

    @pytest.mark.engines("v0", "v1")
    def test_both(engine):
        pass

    @pytest.mark.engines("v0", v1="xfail: not ported")
    def test_gap(engine):
        assert engine == "v0"

    @pytest.mark.engines("v0")
    def test_v0_only(engine):
        pass

    @pytest.mark.engines("v1")
    def test_fails_on_v1(engine):
        assert False

    def test_plain():
        pass
"""


def test_coverage_table_and_json(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_matrix=MATRIX)
    result = run(suite, "--engine-report", "out/cov.json")
    result.assert_outcomes(passed=5, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*engine coverage*",
            "engine*passed*failed*xfailed*xpassed*skipped*not covered",
            "v0 * 3 * 0 * 0 * 0 * 0 * 1",
            "v1 * 1 * 1 * 1 * 0 * 0 * 1",
        ]
    )
    data = json.loads((suite.path / "out" / "cov.json").read_text())
    assert data["engines"]["v1"] == {
        "passed": 1,
        "failed": 1,
        "xfailed": 1,
        "xpassed": 0,
        "skipped": 0,
        "not_covered": 1,
    }
    assert {"test": "test_matrix.py::test_v0_only", "engine": "v0", "outcome": "passed"} in data[
        "tests"
    ]


def test_coverage_under_xdist(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_matrix=MATRIX)
    result = run(suite, "-n", "2", "--engine-report", "cov.json")
    result.assert_outcomes(passed=5, failed=1, xfailed=1)
    data = json.loads((suite.path / "cov.json").read_text())
    assert data["engines"]["v0"]["passed"] == 3


def test_xdist_workers_each_fork_their_children(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = suite.path / "pids.log"
    monkeypatch.setenv("PID_LOG", str(log))
    suite.makepyfile(
        test_x="""
        import os, pytest

        @pytest.mark.parametrize("n", range(6))
        def test_n(n):
            with open(os.environ["PID_LOG"], "a") as f:
                f.write(f"{os.getpid()} {os.getppid()} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")
            if n == 3:
                os.kill(os.getpid(), 9)
    """
    )
    result = run(suite, "-n", "2", "--isolate", "test")
    result.assert_outcomes(passed=5, failed=1)
    rows = [line.split() for line in log.read_text().splitlines()]
    assert len({pid for pid, _, _ in rows}) == 6
    assert {worker for _, _, worker in rows} == {"gw0", "gw1"}


def test_seed_is_reset_printed_and_replayable(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_seed="""
        import random

        def test_a():
            print("draw", random.random())

        def test_b():
            print("draw", random.random())
            assert False
    """
    )
    result = run(suite, "-rA", "--harness-seed", "1234")
    draws = [line for line in result.stdout.lines if line.startswith("draw ")]
    assert len(draws) == 2 and draws[0] == draws[1]
    result.stdout.fnmatch_lines(["*seed 1234 (replay: --harness-seed 1234)*"])
    again = run(suite, "-rA", "--harness-seed", "1234")
    assert [line for line in again.stdout.lines if line.startswith("draw ")] == draws


def test_find_polluter(suite: pytest.Pytester) -> None:
    suite.makepyfile(state="VALUES = []")
    suite.makepyfile(
        test_poll="""
        import pytest, state

        @pytest.mark.parametrize("n", range(5))
        def test_clean(n):
            pass

        def test_polluter():
            state.VALUES.append(1)

        @pytest.mark.parametrize("n", range(4))
        def test_more(n):
            pass

        def test_victim():
            assert state.VALUES == []
    """
    )
    result = run(suite, "--isolate", "none", "--find-polluter", "test_poll.py::test_victim")
    result.stdout.fnmatch_lines(
        ["*polluter is test_poll.py::test_polluter*", "*polluter: test_poll.py::test_polluter*"]
    )
    result = run(suite, "--find-polluter", "test_nothing")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_lf_k_x_and_junit(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_sel="""
        import pytest

        @pytest.mark.engines("v0", "v1")
        def test_ok(engine):
            pass

        @pytest.mark.engines("v0", "v1")
        def test_bad(engine):
            assert engine == "v0"

        def test_last():
            pass
    """
    )
    quiet = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")
    first = suite.runpytest_subprocess(*quiet, "--junitxml=j.xml")
    first.assert_outcomes(passed=4, failed=1)
    assert 'name="test_bad[v1]"' in (suite.path / "j.xml").read_text()
    again = suite.runpytest_subprocess(*quiet, "--lf", "-v")
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*test_bad[[]v1[]] FAILED*"])
    picked = run(suite, "-k", "ok and v1", "-v")
    picked.assert_outcomes(passed=1, deselected=4)
    picked.stdout.fnmatch_lines(["*test_ok[[]v1[]] PASSED*"])
    stopped = run(suite, "-x", "--isolate", "test")
    assert stopped.parseoutcomes()["failed"] == 1
    assert "test_last" not in stopped.stdout.str().split("short test summary")[0]


def test_random_order_plugin(suite: pytest.Pytester) -> None:
    pytest.importorskip("pytest_randomly")
    suite.makepyfile(test_r=MATRIX)
    result = suite.runpytest_subprocess("-p", "randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=1, xfailed=1)


def test_cuda_guard_names_the_first_init(monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"init": False}

    def lazy_init() -> None:
        state["init"] = True

    fake_cuda = types.SimpleNamespace(_lazy_init=lazy_init, is_initialized=lambda: state["init"])
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    cuda.record()
    cuda.guard()  # not initialised: fine

    def conftest_level_init() -> None:
        fake_cuda._lazy_init()

    conftest_level_init()
    with pytest.raises(RuntimeError, match=r"(?s)spawn.*conftest_level_init"):
        cuda.guard()


def test_wire_round_trip() -> None:
    read, write = os.pipe()
    try:
        first = Report("a::b[v0]", data={"longrepr": ("f.py", 3, "skip")})
        second = Report("a::c[v1]", whole=(dict, {"outcome": "passed"}))
        wire.send(write, first, second)  # one write, two messages
        os.close(write)
        reader = wire.Reader(read)
        assert reader.ready(0)
        assert reader.recv() == first
        assert reader.recv() == second
        assert reader.recv() is None
    finally:
        os.close(read)


@pytest.mark.parametrize(
    ("nodeid", "base"),
    [
        ("t.py::test_x[v0]", "t.py::test_x"),
        ("t.py::test_x[v0-3]", "t.py::test_x[3]"),
        ("t.py::test_x[2-v0]", "t.py::test_x[2]"),
    ],
)
def test_coverage_base_id(nodeid: str, base: str) -> None:
    assert coverage._base(nodeid, "v0") == base


def test_warnings_from_children_are_recorded_and_filtered(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_w="""
        import warnings, pytest

        def test_warns():
            warnings.warn("old api", DeprecationWarning)

        @pytest.mark.filterwarnings("error::RuntimeWarning")
        def test_error_filter():
            warnings.warn("now an error", RuntimeWarning)
    """
    )
    result = run(suite, "--isolate", "test")
    result.assert_outcomes(passed=1, failed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*warnings summary*", "*DeprecationWarning: old api*", "*RuntimeWarning: now an error*"]
    )


def test_cuda_initialised_before_fork_fails_the_run(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        torch="""
        import types
        _state = {"on": False}

        def _lazy_init():
            _state["on"] = True

        cuda = types.SimpleNamespace(_lazy_init=_lazy_init, is_initialized=lambda: _state["on"])
    """
    )
    suite.makeconftest("""
        import torch

        def setup_gpu_at_import():
            torch.cuda._lazy_init()

        setup_gpu_at_import()
    """)
    suite.makepyfile(test_x="def test_x(): pass")
    ini(suite, "harness_preload = torch")  # preloaded: its CUDA init is watched from the start
    result = run(suite)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*CUDA was initialised in the process that forks*",
            "*First CUDA initialisation:*",
            "*setup_gpu_at_import*",
        ]
    )
    # spawn starts each child as a fresh interpreter: the answer the error recommends works
    run(suite, "--harness-start", "spawn").assert_outcomes(passed=1)
