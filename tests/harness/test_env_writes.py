"""Writes to the environment by code under test are seen even when the value is unchanged."""

from __future__ import annotations

import pytest
from hx_support import run

DEMO = """
    import os

    def choose(engine):
        os.environ["DEMO_ENGINE"] = engine  # the front door must not do this
        return engine

    def configure():
        os.environ.setdefault("DEMO_THREADS", "4")
"""


@pytest.mark.parametrize("level", ["none", "engine"])
def test_rewrite_with_the_current_value_is_named(suite: pytest.Pytester, level: str) -> None:
    suite.makepyfile(demo=DEMO)
    suite.makepyfile(
        test_front="""
        import os, pytest
        import demo

        @pytest.mark.engines("v0", "v1")
        def test_choose(engine):
            assert os.environ["DEMO_ENGINE"] == engine  # the harness set it
            demo.choose(engine)  # same value: invisible to a before/after comparison

        def test_threads(monkeypatch):
            monkeypatch.setenv("DEMO_THREADS", "4")
            demo.configure()  # setdefault of a variable that is set writes nothing
    """
    )
    result = run(suite, "--isolate", level)
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at teardown of test_choose[[]v0[]]*",
            "*ERROR at teardown of test_choose[[]v1[]]*",
            "*env var DEMO_ENGINE was written by *demo.py:4 (demo) (= 'v0') and never restored*",
            "*env var DEMO_ENGINE was written by *demo.py:4 (demo) (= 'v1') and never restored*",
        ]
    )


def test_writes_by_tests_and_restored_writes_are_fine(suite: pytest.Pytester) -> None:
    suite.makepyfile(demo=DEMO)
    suite.makepyfile(
        test_front="""
        import os
        import demo

        def test_monkeypatch(monkeypatch):
            monkeypatch.setenv("DEMO_ENGINE", "other")

        def test_restored():
            old = os.environ.get("DEMO_ENGINE")
            demo.choose("x")
            if old is None:
                del os.environ["DEMO_ENGINE"]
            else:
                os.environ["DEMO_ENGINE"] = old

        def test_changed_value_names_the_writer():
            demo.configure()
    """
    )
    result = run(suite)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*env var DEMO_THREADS was added (= '4') by *demo.py:8 (demo)*"])


RAISING = """
    import os

    class Front:
        def __init__(self, engine):
            os.environ["DEMO_ENGINE"] = engine  # written, then the constructor gives up
            raise ValueError(f"engine {engine!r} is not allowed")
"""


@pytest.mark.parametrize("level", ["none", "engine"])
def test_engine_var_written_by_a_constructor_that_raised(
    suite: pytest.Pytester, level: str
) -> None:
    """The write is named with its old and new value and undone: the next test is clean."""
    suite.makepyfile(demo=RAISING)
    suite.makepyfile(
        test_front="""
        import os, pytest
        import demo

        @pytest.mark.engines("v0")
        def test_bad_engine(engine):
            with pytest.raises(ValueError):
                demo.Front("v9")

        @pytest.mark.engines("v0")
        def test_next(engine):
            assert os.environ["DEMO_ENGINE"] == "v0"

        def test_after_all():
            assert os.environ.get("DEMO_ENGINE") is None
    """
    )
    result = run(suite, "--isolate", level)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_bad_engine[[]v0[]]*",
            "*env var DEMO_ENGINE was changed from 'v0' to 'v9' by *demo.py:5 (demo)*",
        ]
    )
    assert "held that value already" not in result.stdout.str()


@pytest.mark.parametrize("level", ["none", "engine"])
def test_a_plain_test_setting_the_engine_var_is_named(suite: pytest.Pytester, level: str) -> None:
    suite.makepyfile(
        test_plain="""
        import os, pytest

        def test_sets_engine():
            os.environ["DEMO_ENGINE"] = "v9"

        def test_plain_next():
            assert "DEMO_ENGINE" not in os.environ

        @pytest.mark.engines("v0")
        def test_engine_next(engine):
            os.environ["DEMO_ENGINE"] = "v1"
            os.environ["OTHER_VAR"] = "x"

        def test_last():
            assert "DEMO_ENGINE" not in os.environ and "OTHER_VAR" not in os.environ
    """
    )
    result = run(suite, "--isolate", level, "-p", "no:randomly")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at teardown of test_sets_engine*",
            "*env var DEMO_ENGINE was added (= 'v9')",
            "*ERROR at teardown of test_engine_next[[]v0[]]*",
            "*env var DEMO_ENGINE was changed from 'v0' to 'v1'",
            "*env var OTHER_VAR was added (= 'x')",
        ]
    )
