"""Patches made while a module is imported, and ops defined twice after collection."""

from __future__ import annotations

import importlib.util

import pytest
from hx_support import ini, run

CORE = """
    def choose_tokens():
        return "real"
"""

ENGINE = """
    from unittest import mock
    import demo.core

    def _fast():
        return "fake"

    mock.patch("demo.core.choose_tokens", _fast).start()  # outlives every test
"""


@pytest.fixture
def pkg(suite: pytest.Pytester) -> pytest.Pytester:
    suite.mkpydir("demo")
    suite.makepyfile(**{"demo/core": CORE, "demo/engine": ENGINE})
    return suite


def test_patch_at_import_of_a_preloaded_module_fails_the_run(pkg: pytest.Pytester) -> None:
    ini(pkg, "harness_preload = demo.core demo.engine")
    pkg.makepyfile(
        test_x="""
        import demo.core

        def test_x():
            assert demo.core.choose_tokens() == "fake"  # every test would see the swap
    """
    )
    result = run(pkg)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*patched at import time*",
            "*unittest.mock patch of demo.core.choose_tokens is still active "
            "(while importing demo.engine)*",
        ]
    )


def test_patch_at_import_of_a_test_module_fails_the_run(pkg: pytest.Pytester) -> None:
    pkg.makepyfile(
        test_x="""
        import demo.core
        demo.core.choose_tokens = lambda: "fake"

        def test_x():
            pass
    """
    )
    result = run(pkg)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*demo.core.choose_tokens was replaced by <function <lambda>*(while importing test_x.py)*"]
    )


def _need_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


@pytest.mark.slow
def test_duplicate_op_defined_inside_a_test_is_named_as_a_duplicate(
    suite: pytest.Pytester,
) -> None:
    _need_torch()
    ini(suite, "harness_preload = torch")
    for name, factor in (("backend_a", 2), ("backend_b", 3)):
        suite.makepyfile(
            **{
                name: f"""
            import torch

            @torch.library.custom_op("demo::scale", mutates_args=())
            def scale(x: torch.Tensor) -> torch.Tensor:
                return x * {factor}
        """
            }
        )
    suite.makepyfile(
        test_lazy="""
        def test_a():
            import backend_a

        def test_b():
            import backend_b  # lazily imported: registers the same name again
    """
    )
    result = run(suite, "--isolate", "none", "-p", "no:randomly")
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_b*",
            "*custom op demo::scale defined twice: first at *backend_a.py:*, "
            "again at *backend_b.py:*",
        ]
    )
