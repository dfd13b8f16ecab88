"""Python children of the code under test: a patch made while they import watched code is named."""

from __future__ import annotations

import pytest
from hx_support import ini, run

CORE = """
    import os

    class Sampler:
        pass

    def choose_tokens():
        return "real"
"""

RUNNER = """
    from unittest import mock
    import demo.core

    mock.patch("demo.core.Sampler", object).start()  # outlives the import, in the child
"""

SETS_ENV = """
    import os

    os.environ["DEMO_CHILD_MODE"] = "fast"  # a write made while the child imports demo
"""

# the engine starts its worker as a fresh interpreter, as a multi-process engine does
ENGINE = """
    import subprocess, sys

    def start(module):
        child = subprocess.run(
            [sys.executable, "-c", f"import {module}; print('child ran')"],
            capture_output=True, text=True,
        )
        assert child.returncode == 0, child.stderr
        return child.stdout
"""


# a worker that serves requests, as an engine's worker process does; asked to, it swaps a
# function of a watched module while it runs, importing nothing
WORKER = """
    import sys
    import demo.core

    def main():
        for line in sys.stdin:
            if line.strip() == "swap":
                demo.core.choose_tokens = lambda: "default"
            print(demo.core.choose_tokens(), flush=True)
"""


@pytest.fixture
def pkg(suite: pytest.Pytester) -> pytest.Pytester:
    suite.mkpydir("demo")
    suite.makepyfile(
        **{
            "demo/core": CORE,
            "demo/runner": RUNNER,
            "demo/sets_env": SETS_ENV,
            "demo/engine": ENGINE,
            "demo/worker": WORKER,
        }
    )
    return suite


TESTS = """
    import demo.engine

    def test_patching_child():
        assert demo.engine.start("demo.runner") == "child ran\\n"

    def test_clean_child():
        assert demo.engine.start("demo.core") == "child ran\\n"
"""


@pytest.mark.parametrize("level", ["none", "engine"])
def test_patch_in_a_python_child_fails_the_test(pkg: pytest.Pytester, level: str) -> None:
    pkg.makepyfile(test_engine=TESTS)
    result = run(pkg, "--isolate", level, "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_patching_child*",
            "*Python child process * (* -c import demo.runner; print('child ran')): "
            "unittest.mock patch of demo.core.Sampler is still active "
            "(while importing demo.runner)*",
        ]
    )
    assert "test_clean_child" not in result.stdout.str().split("short test summary")[-1]


def test_env_write_during_a_watched_import_in_a_child(pkg: pytest.Pytester) -> None:
    pkg.makepyfile(
        test_env="""
        import demo.engine

        def test_env_child():
            demo.engine.start("demo.sets_env")
    """
    )
    result = run(pkg)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*Python child process * (*import demo.sets_env*): env var DEMO_CHILD_MODE was "
            "set to 'fast' by *sets_env.py:* (while importing demo.sets_env)*",
        ]
    )


def test_child_leaks_honour_warn(pkg: pytest.Pytester) -> None:
    pkg.makepyfile(test_engine=TESTS)
    result = run(pkg, "--leaks", "warn")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*harness leaks (warn)*", "*test_patching_child*demo.core.Sampler is still active*"]
    )


def test_a_sitecustomize_of_the_project_still_runs(pkg: pytest.Pytester) -> None:
    site = pkg.mkdir("site")
    (site / "sitecustomize.py").write_text("import os\nos.environ['PROJECT_SITE'] = 'ran'\n")
    ini(pkg, "")
    pkg.makepyfile(
        test_site="""
        import os, subprocess, sys

        def test_site():
            env = {**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + "site"}
            code = "import os; print(os.environ.get('PROJECT_SITE'))"
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
            assert out.stdout.decode().strip() == "ran"
    """
    )
    run(pkg).assert_outcomes(passed=1)


SERVING = """
    import subprocess, sys
    import pytest

    @pytest.fixture(scope="module")
    def worker():
        code = "import demo.worker; demo.worker.main()"
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        yield proc
        proc.stdin.close()
        assert proc.wait(30) == 0

    def ask(proc, line):
        proc.stdin.write(line + "\\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    def test_ready(worker):
        assert ask(worker, "run") == "real"

    def test_swaps(worker):
        assert ask(worker, "swap") == "default"

    def test_after(worker):
        assert ask(worker, "run") == "real"  # put back in the worker by the harness
"""


@pytest.mark.parametrize("level", ["none", "engine"])
def test_a_live_worker_swapping_without_importing_is_checked_at_the_test_end(
    pkg: pytest.Pytester, level: str
) -> None:
    pkg.makepyfile(test_serving=SERVING)
    result = run(pkg, "--isolate", level)
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_swaps*",
            "*Python child process * (*import demo.worker; demo.worker.main()): "
            "demo.core.choose_tokens was replaced by <function *<lambda> at *> (a patch that was "
            "never undone?) (seen when the harness checked at a test's start or end)*",
        ]
    )
    assert "test_ready" not in result.stdout.str().split("short test summary")[-1]


def test_a_child_swapping_without_importing_is_checked_at_its_exit(pkg: pytest.Pytester) -> None:
    pkg.makepyfile(
        test_exit="""
        import subprocess, sys

        def test_child_swaps():
            code = "import demo.core; demo.core.Sampler = dict"
            subprocess.run([sys.executable, "-c", code], check=True)
    """
    )
    result = run(pkg)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*Python child process * (*import demo.core; demo.core.Sampler = dict): "
            "demo.core.Sampler was replaced by <class 'dict'> (a patch that was never undone?) "
            "(at its exit)*",
        ]
    )
