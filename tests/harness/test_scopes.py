"""Leaks made by fixtures: a function fixture's are its test's, a wider fixture's its own."""

from __future__ import annotations

import psutil
import pytest
from hx_support import run


def test_function_fixture_leak_is_reported_beside_a_module_fixture(
    suite: pytest.Pytester,
) -> None:
    suite.makepyfile(
        test_env="""
        import os, pytest

        @pytest.fixture(scope="module")
        def server():
            yield "up"

        @pytest.fixture
        def settings_env():
            os.environ["FN_VAR"] = "1"  # set, never undone
            yield

        def test_uses_both(server, settings_env):
            pass

        def test_next():
            assert "FN_VAR" not in os.environ
    """
    )
    result = run(suite)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_uses_both*", "*env var FN_VAR was added (= '1')*"]
    )


@pytest.mark.parametrize("scope", ["module", "class", "session"])
def test_wider_fixture_leaks_are_reported_at_its_teardown(
    suite: pytest.Pytester, scope: str
) -> None:
    suite.makepyfile(
        test_fixture=f"""
        import os, subprocess, sys, pytest

        @pytest.fixture(scope="{scope}")
        def service():
            os.environ["SERVICE_URL"] = "http://x"
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            open("service.pid", "w").write(str(proc.pid))
            yield proc  # neither is undone

        class TestService:
            def test_a(self, service):
                pass

            def test_b(self, service):
                assert os.environ["SERVICE_URL"] == "http://x"
    """
    )
    result = run(suite)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at teardown of TestService.test_b*",
            f"*fixture 'service' ({scope} scope, set up for *test_a): env var SERVICE_URL "
            "is still 'http://x' (it was unset before the fixture)*",
            f"*fixture 'service' ({scope} scope, *): child process * it started is still alive*",
        ]
    )
    pid = int((suite.path / "service.pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_wider_fixture_that_cleans_up_is_not_blamed(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_fixture="""
        import os, pytest

        @pytest.fixture(scope="module")
        def service(request):
            os.environ["SERVICE_URL"] = "x"
            yield
            del os.environ["SERVICE_URL"]

        @pytest.fixture(scope="module", params=[1, 2])
        def size(request):
            os.environ["SIZE"] = str(request.param)
            yield request.param
            del os.environ["SIZE"]

        def test_a(service, size):
            assert os.environ["SIZE"] == str(size)

        def test_b(service):
            pass
    """
    )
    for level in ("none", "engine", "test"):
        run(suite, "--isolate", level).assert_outcomes(passed=3)


@pytest.mark.parametrize("level", ["none", "engine", "module"])
def test_module_fixture_on_the_engine_is_one_per_engine_and_its_own(
    suite: pytest.Pytester, level: str
) -> None:
    suite.makepyfile(
        test_server="""
        import subprocess, sys, pytest

        pytestmark = pytest.mark.engines("a", "b")

        @pytest.fixture(scope="module")
        def server(engine):
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            with open("started.txt", "a") as f:
                f.write(engine + "\\n")
            yield engine
            proc.kill()
            proc.wait()

        def test_one(server, engine):
            assert server == engine

        def test_two(server, engine):
            assert server == engine
    """
    )
    run(suite, "--isolate", level).assert_outcomes(passed=4)
    assert sorted((suite.path / "started.txt").read_text().split()) == ["a", "b"]
