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
