"""A pytest plugin that runs each suite on every engine in fresh, isolated processes.

Configure it from ``[tool.pytest.ini_options]`` (``harness_*`` options); mark tests with
``@engines("v0", "v1")`` (or ``pytest.mark.engines``) and use the ``engine``,
``isolated_env`` and ``scoped_ops`` fixtures.

Three rooms: ``plugin`` is the pytest face (hooks, options, markers, fixtures, the roles a
process plays, coverage, the polluter hunt), ``isolation`` runs tests in fresh processes
(zygote, children, the pipe, timeouts) and ``leaks`` holds one ``LeakCheck`` per kind of
leak. The names below load on first use, so importing ``tandem.harness`` loads neither
pytest nor the plugin: Python children of the code under test import the probe in
``tandem.harness.leaks`` at start-up.

PYTEST_DONT_REWRITE: a pytest started as such a child has this package loaded before
pytest looks at its plugins; the marker tells pytest not to warn that it cannot rewrite
its asserts (the harness relies on none).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .plugin.fixtures import IsolatedEnv, engine, isolated_env, scoped_ops
    from .plugin.markers import EngineSpec, engines, isolate, parse_engines, timeout

_HOMES = {
    "EngineSpec": "markers",
    "engines": "markers",
    "isolate": "markers",
    "parse_engines": "markers",
    "timeout": "markers",
    "IsolatedEnv": "fixtures",
    "engine": "fixtures",
    "isolated_env": "fixtures",
    "scoped_ops": "fixtures",
}

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


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.plugin.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
