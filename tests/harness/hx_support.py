"""Helpers for the harness's tests (imported by the test modules of this folder)."""

from __future__ import annotations

import textwrap

import pytest

INI = """
[pytest]
harness_engine_env = DEMO_ENGINE
harness_watch_prefixes = demo
harness_ops_namespace = demo
{extra}
"""


def ini(pytester: pytest.Pytester, extra: str) -> None:
    pytester.makefile(".ini", pytest=INI.format(extra=textwrap.dedent(extra)))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytest in a subprocess (forks and global state stay out of this process)."""
    quiet = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:anyio")
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", *quiet, *args
    )
