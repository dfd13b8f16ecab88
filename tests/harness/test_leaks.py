"""Leak checks: each planted leak fails the test that leaked, names the culprit, is undone."""

from __future__ import annotations

import importlib.util

import psutil
import pytest
from hx_support import ini, run

DEMO = """
    import functools, os

    class Sampler:
        pass

    def helper():
        return "real"

    @functools.lru_cache
    def backend():
        return os.environ.get("DEMO_ENGINE")

    REGISTRY = {}

    def clear_registry():
        REGISTRY.clear()
"""


def _need_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


@pytest.fixture
def demo(suite: pytest.Pytester) -> pytest.Pytester:
    suite.makepyfile(demo=DEMO)
    return suite


@pytest.mark.parametrize("level", ["none", "engine"])
def test_env_leak(demo: pytest.Pytester, level: str) -> None:
    demo.makepyfile(
        test_env="""
        import os

        def test_leaks():
            os.environ["LEAKY_VAR"] = "1"
            os.environ.pop("HOME_AWAY", None)

        def test_next():
            assert "LEAKY_VAR" not in os.environ
    """
    )
    result = run(demo, "--isolate", level)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_leaks*", "*env var LEAKY_VAR was added (= '1')*"]
    )


def test_module_fixture_changes_are_not_blamed_on_its_first_test(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_env="""
        import os, pytest

        @pytest.fixture(scope="module")
        def server_env():
            os.environ["SERVER_URL"] = "x"
            yield
            del os.environ["SERVER_URL"]

        def test_a(server_env):
            pass

        def test_b(server_env):
            pass
    """
    )
    run(demo, "--isolate", "none").assert_outcomes(passed=2)


def test_process_leak_is_named_and_killed(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_proc="""
        import subprocess, sys

        def test_leaks():
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            open("leaked.pid", "w").write(str(proc.pid))
    """
    )
    result = run(demo, "--isolate", "none")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*child process * is still alive: *time.sleep(60)*"])
    pid = int((demo.path / "leaked.pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_thread_leak_is_named(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_thread="""
        import threading, time

        def test_leaks():
            threading.Thread(target=time.sleep, args=(2,), name="leaky-worker").start()

        def test_daemon_is_fine():
            threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
    """
    )
    result = run(demo)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*non-daemon thread 'leaky-worker' is still alive*"])


def test_patch_leaks_are_named_and_undone(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_patch="""
        from unittest import mock
        import demo

        def test_started_patch():
            mock.patch("demo.Sampler", mock.MagicMock()).start()

        def test_assignment():
            demo.helper = lambda: "fake"

        def test_context_patch_is_fine():
            with mock.patch("demo.helper", return_value="x"):
                assert demo.helper() == "x"

        def test_after():
            assert demo.helper() == "real"
            assert isinstance(demo.Sampler, type)
    """
    )
    result = run(demo, "--isolate", "none")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "*unittest.mock patch of demo.Sampler is still active*",
            "*demo.helper was replaced by <function*",
        ]
    )


def test_caches_cleared_when_the_engine_changes(demo: pytest.Pytester) -> None:
    ini(demo, "harness_cache_clearers = demo:clear_registry")
    demo.makepyfile(
        test_cache="""
        import pytest
        import demo

        @pytest.mark.engines("v0", "v1")
        def test_backend(engine):
            assert demo.backend() == engine
            assert demo.REGISTRY == {}
            demo.REGISTRY[engine] = 1
    """
    )
    run(demo, "--isolate", "none", "-p", "no:randomly").assert_outcomes(passed=2)


def test_bad_cache_clearer_is_named(demo: pytest.Pytester) -> None:
    ini(demo, "harness_cache_clearers = demo")
    demo.makepyfile(test_x="def test_x(): pass")
    result = run(demo, "--isolate", "none")
    result.stdout.fnmatch_lines(
        ["*harness_cache_clearers: expected 'module:function', got 'demo'*"]
    )


def test_warn_mode_reports_without_failing(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_env="""
        import os

        def test_leaks():
            os.environ["LEAKY_VAR"] = "1"
    """
    )
    result = run(demo, "--leaks", "warn")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*harness leaks (warn)*", "test_env.py::test_leaks: env var LEAKY_VAR was added*"]
    )


def test_isolated_env_fixture(demo: pytest.Pytester) -> None:
    demo.makepyfile(
        test_env="""
        import os, pytest

        def test_set(isolated_env):
            isolated_env.setenv("MY_VAR", "1")
            isolated_env.delenv("HOME")
            with pytest.raises(ValueError, match="DEMO_ENGINE selects the engine"):
                isolated_env.setenv("DEMO_ENGINE", "v1")
            with pytest.raises(TypeError, match="value must be str"):
                isolated_env.setenv("X", 1)

        def test_after():
            assert "MY_VAR" not in os.environ and "HOME" in os.environ
    """
    )
    run(demo, "--isolate", "none").assert_outcomes(passed=2)


@pytest.mark.slow
def test_op_leak_and_scoped_ops(demo: pytest.Pytester) -> None:
    _need_torch()
    demo.makepyfile(
        test_ops="""
        import torch

        KEEP = []

        def test_leaks():
            lib = torch.library.Library("demo", "FRAGMENT")
            lib.define("leaky(Tensor x) -> Tensor")
            KEEP.append(lib)

        def test_scoped(scoped_ops):
            scoped_ops.define("scoped(Tensor x) -> Tensor")
    """
    )
    result = run(demo, "--isolate", "none")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*custom op demo::leaky was registered and not removed*"])


@pytest.mark.slow
def test_duplicate_op_definitions_fail_the_session(demo: pytest.Pytester) -> None:
    _need_torch()
    ini(demo, "harness_preload = torch")
    for name in ("ops_a", "ops_b"):
        demo.makepyfile(
            **{
                name: """
            import torch

            @torch.library.custom_op("demo::twice", mutates_args=())
            def twice(x: torch.Tensor) -> torch.Tensor:
                return x * 2
        """
            }
        )
    demo.makepyfile(
        test_ops="""
        import ops_a, ops_b

        def test_x():
            pass
    """
    )
    result = run(demo)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*custom op demo::twice defined twice: first at *ops_a.py:*, again at *ops_b.py:*"]
    )


@pytest.mark.slow
def test_replaced_op_implementation_fails_the_session(demo: pytest.Pytester) -> None:
    _need_torch()
    ini(demo, "harness_preload = torch")
    demo.makepyfile(
        ops_a="""
        import torch

        @torch.library.custom_op("demo::norm", mutates_args=())
        def norm(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @norm.register_kernel("cpu")
        def _(x):
            return x.clone()
    """,
        ops_b="""
        import ops_a

        @ops_a.norm.register_kernel("cpu")
        def _(x):
            return x * 0
    """,
        test_ops="""
        import ops_a, ops_b

        def test_x():
            pass
    """,
    )
    result = run(demo)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*custom op demo::norm has its kernel:cpu implementation "
            "replaced: first at *ops_a.py:*, again at *ops_b.py:*"
        ]
    )
