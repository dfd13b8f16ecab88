"""A pytest plugin that runs each suite on every engine in fresh, isolated processes.

Configure it from ``[tool.pytest.ini_options]`` (``harness_*`` options); mark tests with
``@engines("v0", "v1")`` (or ``pytest.mark.engines``) and use the ``engine``,
``isolated_env`` and ``scoped_ops`` fixtures.
"""

from __future__ import annotations

from typing import Any

import pytest

from .fixtures import IsolatedEnv, engine, isolated_env, scoped_ops
from .markers import EngineSpec, parse_engines

__all__ = [
    "EngineSpec",
    "IsolatedEnv",
    "engine",
    "engines",
    "isolate",
    "isolated_env",
    "parse_engines",
    "scoped_ops",
    "timeout",
]


def engines(*names: str, **gaps: str) -> Any:
    """``pytest.mark.engines(...)``, checked now: bad names or gaps raise at import time."""
    mark = pytest.mark.engines(*names, **gaps)
    parse_engines(mark.mark)
    return mark


def isolate(level: str) -> Any:
    """``pytest.mark.isolate(level)``: run in a fresh process per test/module/engine."""
    from .options import LEVELS

    if level not in LEVELS:
        raise ValueError(f"isolate(level): expected one of {', '.join(LEVELS)}, got {level!r}")
    return pytest.mark.isolate(level)


def timeout(seconds: float) -> Any:
    """``pytest.mark.timeout(seconds)``: kill the isolated child after this many seconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ValueError(f"timeout(seconds): expected a number >= 0, got {seconds!r}")
    return pytest.mark.timeout(seconds)
