"""Declaring engines: parametrisation, the engine env var, gaps, selection, bad input."""

from __future__ import annotations

import pytest
from hx_support import ini, run
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.harness import engines, isolate, parse_engines, timeout


def test_marker_levels_and_env_var(suite: pytest.Pytester) -> None:
    suite.makeconftest("""
        import pytest
        pytestmark = pytest.mark.engines("v0", "v1")
    """)
    suite.makepyfile(
        test_levels="""
        import os, pytest

        def test_package_level(engine):
            assert os.environ["DEMO_ENGINE"] == engine

        @pytest.mark.engines("v1")
        class TestOnlyV1:
            def test_class_level(self, engine):
                assert engine == "v1" == os.environ["DEMO_ENGINE"]

        @pytest.mark.engines("v0", v1="xfail: v1 lacks this")
        def test_gap(engine):
            assert engine == "v0"

        def test_no_engine_arg():
            assert os.environ["DEMO_ENGINE"] in ("v0", "v1")
    """
    )
    suite.makepyfile(
        test_module="""
        import os, pytest
        pytestmark = pytest.mark.engines("v0")

        def test_module_level(engine):
            assert engine == "v0"
    """
    )
    result = run(suite, "-v", "--isolate", "none")
    result.assert_outcomes(passed=7, xfailed=1)
    result.stdout.fnmatch_lines_random(  # tests are grouped by engine
        [
            "*test_levels.py::test_package_level[[]v0[]] PASSED*",
            "*test_levels.py::test_package_level[[]v1[]] PASSED*",
            "*TestOnlyV1::test_class_level[[]v1[]] PASSED*",
            "*test_gap[[]v1[]] XFAIL*v1 lacks this*",
            "*test_module.py::test_module_level[[]v0[]] PASSED*",
        ]
    )
    assert "test_class_level[v0]" not in result.stdout.str()


def test_engine_var_restored_after_test(suite: pytest.Pytester) -> None:
    suite.makepyfile("""
        import os, pytest

        @pytest.mark.engines("v0")
        def test_a(engine):
            assert os.environ["DEMO_ENGINE"] == "v0"

        def test_b():
            assert os.environ.get("DEMO_ENGINE") == "outer"
    """)
    for level in ("none", "test"):
        result = run(suite, "--isolate", level, "-p", "no:randomly")
        result.assert_outcomes(passed=2)


@pytest.fixture(autouse=True)
def _outer_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_ENGINE", "outer")
    monkeypatch.delenv("HARNESS_ENGINES", raising=False)


def test_select_by_option_and_env(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    suite.makepyfile("""
        import pytest

        @pytest.mark.engines("v0", "v1")
        def test_x(engine):
            pass

        def test_plain():
            pass
    """)
    result = run(suite, "-v", "--engines", "v1", "--isolate", "none")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_x[[]v1[]] PASSED*"])
    monkeypatch.setenv("HARNESS_ENGINES", "v0")
    result = run(suite, "-v", "--isolate", "none")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_x[[]v0[]] PASSED*"])


def test_unknown_engine_is_a_usage_error(suite: pytest.Pytester) -> None:
    suite.makepyfile("""
        import pytest

        @pytest.mark.engines("v0", "v1")
        def test_x(engine):
            pass
    """)
    result = run(suite, "--engines", "v9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--engines: unknown engine(s) v9; known engines: v0, v1*"])


def test_unknown_engine_from_entry_point_group(suite: pytest.Pytester) -> None:
    from tandem.harness.plugin import markers

    groups = [g for g in ("pytest11", "console_scripts") if markers.known_engines(g)]
    assert groups, "expected at least one populated entry-point group"
    ini(suite, "harness_engine_group = pytest11")
    suite.makepyfile("""
        import pytest

        @pytest.mark.engines("nope")
        def test_x(engine):
            pass
    """)
    result = run(suite)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown engine*nope*known engines:*tandem_harness*"])


def test_default_engines_for_unmarked_tests(suite: pytest.Pytester) -> None:
    ini(suite, "harness_default_engines = v0 v1")
    suite.makepyfile("""
        def test_plain(engine):
            assert engine in ("v0", "v1")
    """)
    result = run(suite, "-v", "--isolate", "none")
    result.assert_outcomes(passed=2)


def test_bad_gap_is_rejected(suite: pytest.Pytester) -> None:
    suite.makepyfile("""
        import pytest

        @pytest.mark.engines("v0", v1="skip: later")
        def test_x(engine):
            pass
    """)
    result = run(suite, "--isolate", "none")
    result.stdout.fnmatch_lines(["*a gap must be 'xfail: <reason>', got 'skip: later'*"])
    assert result.ret != 0


def test_strict_markers_accepts_harness_markers(suite: pytest.Pytester) -> None:
    suite.makepyfile("""
        import pytest

        @pytest.mark.engines("v0")
        @pytest.mark.isolate("test")
        @pytest.mark.timeout(5)
        def test_x(engine):
            pass
    """)
    run(suite, "--strict-markers").assert_outcomes(passed=1)


def test_helpers_check_input() -> None:
    assert engines("v0", v1="xfail: gap").mark.kwargs == {"v1": "xfail: gap"}
    with pytest.raises(ValueError, match="at least one engine"):
        engines()
    with pytest.raises(TypeError, match="non-empty strings"):
        engines("v0", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duplicate"):
        engines("v0", "v0")
    with pytest.raises(ValueError, match="expected one of none, engine, module, test"):
        isolate("thread")
    with pytest.raises(ValueError, match="number >= 0"):
        timeout(-1)


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(
        st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), min_size=1, max_size=4, unique=True
    ),
    gaps=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True),
        st.from_regex(r"[a-z ]{1,12}", fullmatch=True).map(str.strip).filter(bool),
        max_size=3,
    ),
)
def test_parse_engines_property(names: list[str], gaps: dict[str, str]) -> None:
    mark = pytest.mark.engines(*names, **{k: f"xfail: {v}" for k, v in gaps.items()}).mark
    specs = parse_engines(mark)
    assert [s.name for s in specs] == [n for n in names if n not in gaps] + list(gaps)
    assert {s.name: s.xfail for s in specs if s.xfail} == gaps


def test_each_test_keeps_its_own_engines_whatever_the_collection_order(
    suite: pytest.Pytester,
) -> None:
    """Collection builds short-lived definition nodes; one test's marker never leaks to another."""
    many = "\n".join(
        f"@pytest.mark.engines('v0', 'v1')\n"
        f"@pytest.mark.parametrize('x', range(3))\ndef test_both_{i}(engine, x):\n    pass\n"
        for i in range(30)
    )
    suite.makepyfile(test_a="import pytest\n\n" + many)
    suite.makepyfile(
        test_b="""
        import pytest

        @pytest.mark.engines("v1")
        def test_only_v1(engine):
            assert engine == "v1"

        def test_unmarked():
            pass
    """
    )
    for order in (("test_a.py", "test_b.py"), ("test_b.py", "test_a.py")):
        result = run(suite, "--collect-only", "-q", *order)
        listed = result.stdout.str()
        assert "test_b.py::test_only_v1[v1]" in listed
        assert "test_only_v1[v0]" not in listed
        assert "test_b.py::test_unmarked\n" in listed
