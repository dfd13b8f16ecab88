"""The ``engines``, ``isolate`` and ``timeout`` markers: building, parsing, lookup and
parametrisation."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pytest

from ..settings import LEVELS

MARKERS = (
    "engines(*names, **gaps): run the test once per engine; a gap is declared as "
    "name='xfail: reason'",
    "isolate(level): run the test in its own fresh process ('test', 'module', 'engine', 'none')",
    "timeout(seconds): kill the isolated child and fail the test after this many seconds",
)


@dataclass(slots=True, frozen=True)
class EngineSpec:
    """One engine a test declares, with the reason of a declared gap (xfail) if any."""

    name: str
    xfail: str | None = None


def parse_engines(mark: pytest.Mark) -> list[EngineSpec]:
    """Turn ``engines("v0", v1="xfail: reason")`` into specs; bad input -> TypeError/ValueError."""
    specs: list[EngineSpec] = []
    for name in mark.args:
        if not isinstance(name, str) or not name:
            raise TypeError(f"engines(): engine names must be non-empty strings, got {name!r}")
        specs.append(EngineSpec(name))
    for name, gap in mark.kwargs.items():
        if not isinstance(gap, str) or not gap.startswith("xfail:"):
            raise ValueError(f"engines({name}=...): a gap must be 'xfail: <reason>', got {gap!r}")
        reason = gap[len("xfail:") :].strip()
        if not reason:
            raise ValueError(f"engines({name}=...): the xfail reason is empty in {gap!r}")
        specs = [s for s in specs if s.name != name]
        specs.append(EngineSpec(name, reason))
    if not specs:
        raise ValueError("engines(): at least one engine name is required, got none")
    seen = [s.name for s in specs]
    if len(set(seen)) != len(seen):
        raise ValueError(f"engines(): duplicate engine names in {seen!r}")
    return specs


def engines(*names: str, **gaps: str) -> Any:
    """``pytest.mark.engines(...)``, checked now: bad names or gaps raise at import time."""
    mark = pytest.mark.engines(*names, **gaps)
    parse_engines(mark.mark)
    return mark


def isolate(level: str) -> Any:
    """``pytest.mark.isolate(level)``: run in a fresh process per test/module/engine."""
    if level not in LEVELS:
        raise ValueError(f"isolate(level): expected one of {', '.join(LEVELS)}, got {level!r}")
    return pytest.mark.isolate(level)


def timeout(seconds: float) -> Any:
    """``pytest.mark.timeout(seconds)``: kill the isolated child after this many seconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ValueError(f"timeout(seconds): expected a number >= 0, got {seconds!r}")
    return pytest.mark.timeout(seconds)


_FOLDER_MARKS = pytest.StashKey[dict[tuple[str, str], list[pytest.Mark]]]()


def _conftest_marks(config: pytest.Config, folder: str, name: str) -> list[pytest.Mark]:
    """``pytestmark`` of the conftest.py files in ``folder`` and above it, closest first.

    Cached per folder: a folder's conftest files are all loaded before any test in it is
    collected, and a suite has far fewer folders than tests.
    """
    cache = config.stash.setdefault(_FOLDER_MARKS, {})
    key = (folder, name)
    if key not in cache:
        cache[key] = _scan_conftests(config, folder, name)
    return cache[key]


def _scan_conftests(config: pytest.Config, folder: str, name: str) -> list[pytest.Mark]:
    found: list[tuple[int, list[pytest.Mark]]] = []
    for plugin in config.pluginmanager.get_plugins():
        file = getattr(plugin, "__file__", None)
        if not file or not file.endswith("conftest.py"):
            continue
        home = os.path.dirname(file)
        if folder != home and not folder.startswith(home.rstrip(os.sep) + os.sep):
            continue
        marks = getattr(plugin, "pytestmark", [])
        marks = marks if isinstance(marks, list) else [marks]
        hits = [m.mark if hasattr(m, "mark") else m for m in marks]
        hits = [m for m in hits if getattr(m, "name", None) == name]
        if hits:
            found.append((home.count(os.sep), hits))
    found.sort(key=lambda pair: -pair[0])
    return [mark for _, marks in found for mark in marks]


_CLOSEST = pytest.StashKey[dict[str, "pytest.Mark | None"]]()


def closest(node: Any, name: str) -> pytest.Mark | None:
    """The closest ``name`` marker of a node: its own chain first, then package conftests.

    Remembered in the node's own stash (collection makes short-lived nodes, such as
    FunctionDefinition, whose id() a later node may reuse: an id() key could hand one test
    another test's marker).
    """
    stash = getattr(node, "stash", None)
    known = stash.setdefault(_CLOSEST, {}) if stash is not None else {}
    if name in known:
        return known[name]
    mark = node.get_closest_marker(name)
    if mark is None:
        marks = _conftest_marks(node.config, os.path.dirname(os.fspath(node.path)), name)
        mark = marks[0] if marks else None
    known[name] = mark
    return mark


def declared(definition: Any, defaults: tuple[str, ...]) -> list[EngineSpec]:
    """The engines a test definition runs on: its marker, else the default engines."""
    mark = closest(definition, "engines")
    if mark is not None:
        return parse_engines(mark)
    return [EngineSpec(name) for name in defaults]


def params(specs: list[EngineSpec]) -> list[Any]:
    """``pytest.param`` objects for the ``engine`` argument, gaps marked xfail."""
    out = []
    for spec in specs:
        marks = [pytest.mark.xfail(reason=f"[{spec.name}] {spec.xfail}")] if spec.xfail else []
        out.append(pytest.param(spec.name, id=spec.name, marks=marks))
    return out


def engine_of(item: Any) -> str | None:
    """The engine an item runs on, or None for an engine-independent item."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("engine") if callspec is not None else None
    return value if isinstance(value, str) else None


def isolation_of(item: Any, default: str) -> str:
    """The isolation level of an item: its ``isolate`` marker, else ``default``."""
    mark = closest(item, "isolate")
    if mark is None:
        return default
    level = mark.args[0] if mark.args else mark.kwargs.get("level")
    if level not in LEVELS:
        raise pytest.UsageError(
            f"{item.nodeid}: isolate(level): expected one of {', '.join(LEVELS)}, got {level!r}"
        )
    return level


def timeout_of(item: Any, default: float) -> float:
    """The per-test timeout of an item in seconds (0 = none)."""
    mark = closest(item, "timeout")
    if mark is None:
        return default
    value = mark.args[0] if mark.args else mark.kwargs.get("seconds")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise pytest.UsageError(
            f"{item.nodeid}: timeout(seconds): expected a number >= 0, got {value!r}"
        )
    return float(value)


def known_engines(group: str) -> tuple[str, ...]:
    """Engine names registered in the entry-point ``group`` (empty when there is none)."""
    if not group:
        return ()
    try:
        names = {ep.name for ep in metadata.entry_points(group=group)}
    except Exception:  # a broken distribution must not break the run
        print(f"tandem-harness: cannot read entry points {group!r}", file=sys.stderr)
        return ()
    return tuple(sorted(names))
