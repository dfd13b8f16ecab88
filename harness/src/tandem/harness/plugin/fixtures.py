"""The harness's fixtures: ``engine``, ``engine_impl``, ``isolated_env``, ``scoped_ops``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest

from .state import run_state


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> str | None:
    """The engine this test runs on (None for a test without an engine)."""
    return getattr(request, "param", None)


@pytest.fixture
def engine_impl(engine: str | None, request: pytest.FixtureRequest) -> Any:
    """The object registered for the current engine in ``harness_engine_group``.

    The entry point is loaded in the test's own process, so what a test gets is the engine
    as that process imports it (a class, a factory: whatever the project registered).
    """
    group = run_state(request.config).settings.engine_group
    if engine is None:
        pytest.fail("engine_impl: this test runs on no engine; mark it with engines(...)")
    if not group:
        pytest.fail("engine_impl: set harness_engine_group to the entry-point group of engines")
    for entry in metadata.entry_points(group=group):
        if entry.name == engine:
            return entry.load()
    pytest.fail(f"engine_impl: no entry point {engine!r} in group {group!r}")


class IsolatedEnv:
    """Set and delete env vars for one test; everything is restored afterwards.

    The engine variable belongs to the harness: changing it here raises ValueError.
    """

    def __init__(self, protected: str) -> None:
        self._protected = protected
        self._saved: dict[str, str | None] = {}

    def _check(self, name: Any) -> None:
        if not isinstance(name, str) or not name or "=" in name:
            raise TypeError(f"isolated_env: name must be a non-empty str without '=', got {name!r}")
        if self._protected and name == self._protected:
            raise ValueError(
                f"isolated_env: {name} selects the engine and is set by the "
                "harness; use @pytest.mark.engines(...) instead"
            )
        self._saved.setdefault(name, os.environ.get(name))

    def setenv(self, name: str, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"isolated_env.setenv({name!r}): value must be str, got {value!r}")
        self._check(name)
        os.environ[name] = value

    def delenv(self, name: str, raising: bool = True) -> None:
        self._check(name)
        if name not in os.environ:
            if raising:
                raise KeyError(f"isolated_env.delenv: {name} is not set")
            return
        del os.environ[name]

    def undo(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()


@pytest.fixture
def isolated_env(request: pytest.FixtureRequest) -> Iterator[IsolatedEnv]:
    """A monkeypatch-like env for one test; the engine variable cannot be changed through it."""
    env = IsolatedEnv(run_state(request.config).settings.engine_env)
    yield env
    env.undo()


@pytest.fixture
def scoped_ops(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A torch.library FRAGMENT in ``harness_ops_namespace``, destroyed after the test."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import importlib

            torch = importlib.import_module("torch")
        except ImportError:
            pytest.skip("scoped_ops needs torch, which is not installed")
    namespace = run_state(request.config).settings.ops_namespace
    if not namespace:
        pytest.fail(
            "scoped_ops: set harness_ops_namespace (ini) to the torch.library namespace of "
            "your custom ops; the fragment is made there",
            pytrace=False,
        )
    lib = torch.library.Library(namespace, "FRAGMENT")
    yield lib
    lib._destroy()
