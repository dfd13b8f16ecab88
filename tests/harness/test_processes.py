"""Process hygiene: orphans are caught, and terminating pytest ends every child it made."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from hx_support import run


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_for(path: Path, limit: float = 60) -> str:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


@pytest.mark.parametrize("level", ["none", "engine"])
def test_double_forked_orphan_is_named_and_ended(suite: pytest.Pytester, level: str) -> None:
    suite.makepyfile(
        test_orphan="""
        import subprocess

        def test_daemonises():
            # the shell exits at once; its background sleep is orphaned
            subprocess.run(["sh", "-c", "sleep 61 >/dev/null 2>&1 & echo $! > orphan.pid"])
    """
    )
    result = run(suite, "--isolate", level)
    result.assert_outcomes(passed=1, errors=1)
    pid = int((suite.path / "orphan.pid").read_text())
    result.stdout.fnmatch_lines([f"*child process {pid} is still alive: *"])
    assert _gone(pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_terminating_pytest_ends_the_zygote_and_children(
    suite: pytest.Pytester, signum: int
) -> None:
    suite.makepyfile(
        test_hang="""
        import os, time

        def test_hang():
            with open("pids.txt", "w") as f:
                f.write(f"{os.getpid()} {os.getppid()}\\n")
            time.sleep(120)
    """
    )
    proc = suite.popen(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"],
        stdin=None,
    )
    try:
        child, zygote = map(int, _wait_for(suite.path / "pids.txt").split())
        assert child != proc.pid and zygote != proc.pid
        os.kill(proc.pid, signum)
        proc.wait(30)
        end = time.monotonic() + 10
        while not (_gone(child) and _gone(zygote)) and time.monotonic() < end:
            time.sleep(0.05)
        assert _gone(child), "the test's child outlived pytest"
        assert _gone(zygote), "the zygote outlived pytest"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
