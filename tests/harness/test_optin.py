"""Opt-in: an unconfigured project runs as under plain pytest; configured, every claim holds."""

from __future__ import annotations

import pytest
from hx_support import ini, run

LEAKY = """
    import os, random

    def test_sets_env():
        os.environ["UNRELATED_PROJECT_VAR"] = "1"

    def test_sees_it():
        assert os.environ.get("UNRELATED_PROJECT_VAR") == "1"  # plain pytest: it does
"""


def test_unconfigured_project_runs_as_plain_pytest(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_plain=LEAKY)
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    output = result.stdout.str()
    assert "tandem-harness:" not in output
    assert "engine coverage" not in output
    assert "leak check" not in output


@pytest.mark.parametrize(
    ("how", "args"),
    [
        ("ini", ()),
        ("flag", ("--isolate", "none")),
        ("flag", ("--leaks", "fail")),
        ("override", ("-o", "harness_leaks=fail")),
    ],
)
def test_any_harness_setting_switches_it_on(
    pytester: pytest.Pytester, how: str, args: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\nharness_leaks = fail\n" if how == "ini" else "[pytest]\n")
    pytester.makepyfile(test_plain=LEAKY)
    result = run(pytester, *args)
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["tandem-harness: *", "*env var UNRELATED_PROJECT_VAR was added*"])


def test_an_engines_marker_switches_it_on(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_marked="""
        import os, pytest

        @pytest.mark.engines("a", "b")
        def test_x(engine):
            assert engine in ("a", "b")
            os.environ["MARKED_VAR"] = engine
    """
    )
    result = run(pytester)
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines_random(["*engine coverage*", "*env var MARKED_VAR was added*"])


def test_engine_names_declared_in_ini(suite: pytest.Pytester) -> None:
    ini(suite, "harness_engines = alpha beta")
    suite.makepyfile(
        test_typo="""
        import pytest

        @pytest.mark.engines("alpha", "betta")
        def test_x(engine):
            pass
    """
    )
    result = run(suite)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*unknown engine in @pytest.mark.engines: test_typo.py::test_x: betta*alpha, beta*"]
    )


def test_coverage_table_shows_stale_gaps_as_xpassed(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_gap="""
        import pytest

        @pytest.mark.engines("v0", v1="xfail: not built yet")
        def test_gap(engine):
            pass  # it works on v1 now: the declaration is stale
    """
    )
    result = run(suite, "--engine-report", "cov.json")
    result.assert_outcomes(passed=1, xpassed=1)
    result.stdout.fnmatch_lines(
        [
            "engine*passed*failed*xfailed*xpassed*skipped*not covered",
            "v0 * 1 * 0 * 0 * 0 * 0 * 0",
            "v1 * 0 * 0 * 0 * 1 * 0 * 0",
        ]
    )
    assert '"xpassed": 1' in (suite.path / "cov.json").read_text()


def test_engine_impl_fixture_loads_the_registered_engine(suite: pytest.Pytester) -> None:
    ini(suite, "harness_engine_group = hx_demo_engines")
    dist = suite.mkdir("hx_demo-1.0.dist-info")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hx-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[hx_demo_engines]\nfast = engines_demo:Fast\nslow = engines_demo:Slow\n"
    )
    suite.makepyfile(
        engines_demo="""
        class Fast:
            speed = 2

        class Slow:
            speed = 1
    """,
        test_impl="""
        import pytest

        @pytest.mark.engines("fast", "slow")
        def test_impl(engine, engine_impl):
            assert engine_impl.__name__.lower() == engine

        def test_no_engine(engine_impl):
            pass
    """,
    )
    result = run(suite)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*engine_impl: this test runs on no engine*"])


@pytest.mark.parametrize("how", ["ini", "override", "none"])
def test_no_pytest_deprecation_warning(pytester: pytest.Pytester, how: str) -> None:
    """The newest pytest's removals are errors here: the harness uses none of them."""
    pytester.makeini("[pytest]\nharness_leaks = fail\n" if how == "ini" else "[pytest]\n")
    pytester.makepyfile(test_plain="def test_x():\n    pass\n")
    override = ("-o", "harness_isolation=engine") if how == "override" else ()
    result = run(pytester, "-W", "error::pytest.PytestRemovedIn10Warning", *override)
    result.assert_outcomes(passed=1)
    if how != "none":
        result.stdout.fnmatch_lines(["tandem-harness: *"])
