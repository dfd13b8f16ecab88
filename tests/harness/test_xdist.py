"""Under pytest-xdist: each worker preloads, and a run-ending problem reaches the controller."""

from __future__ import annotations

import pytest
from hx_support import ini, run

pytest.importorskip("xdist")

# like torch._dynamo: its first import writes an env var, once per process
PRELOADED = """
    import os

    os.environ.setdefault("PRELOADED_CACHE_DIR", "/tmp/cache")
    with open(os.environ["PRELOAD_LOG"], "a") as f:
        f.write(f"{os.getpid()} {os.environ.get('PYTEST_XDIST_WORKER', '-')}\\n")
"""


def test_each_worker_preloads(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    log = suite.path / "preload.log"
    monkeypatch.setenv("PRELOAD_LOG", str(log))
    suite.makepyfile(preloaded=PRELOADED)
    ini(suite, "harness_preload = preloaded")
    suite.makepyfile(
        test_lazy="""
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_imports_it_lazily(n):
            import preloaded  # preloaded: no env var appears during the test
    """
    )
    result = run(suite, "-n", "2")
    result.assert_outcomes(passed=4)
    result.stdout.no_fnmatch_line("*PRELOADED_CACHE_DIR*")
    workers = {line.split()[1] for line in log.read_text().splitlines()}
    assert {"gw0", "gw1"} <= workers, log.read_text()


def test_import_time_patch_is_told_by_the_controller(suite: pytest.Pytester) -> None:
    suite.mkpydir("demo")
    suite.makepyfile(
        **{
            "demo/core": "def choose_tokens():\n    return 'real'\n",
            "demo/engine": (
                "from unittest import mock\nimport demo.core\n\n"
                "mock.patch('demo.core.choose_tokens', lambda: 'fake').start()\n"
            ),
        }
    )
    ini(suite, "harness_preload = demo.core demo.engine")
    suite.makepyfile(test_x="def test_x():\n    pass\n")
    result = run(suite, "-n", "2")
    assert result.ret not in (0, pytest.ExitCode.INTERNAL_ERROR)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    result.stdout.fnmatch_lines(
        [
            "*patched at import time*",
            "*unittest.mock patch of demo.core.choose_tokens is still active "
            "(while importing demo.engine)*",
        ]
    )
