"""Cache clearing at isolation and engine boundaries.

Discovered duck-typed (any object with ``cache_clear`` in a watched module: lru_cache,
cache, env_cache) plus the callables configured in ``harness_cache_clearers``. A module's
caches are looked for once, in its clean state (right after its import): a fresh child
per test would otherwise ask every attribute of every watched module each time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .attributes import watched
from .imports import WATCHER

_RESOLVED: dict[str, Callable[[], Any]] = {}
_FOUND: dict[str, tuple[Any, list[Any]]] = {}  # module -> (its clean state, its caches)


def _caches(values: list[Any]) -> list[Any]:
    out, seen = [], set()
    for value in values:
        if isinstance(value, type) or id(value) in seen:
            continue
        if callable(getattr(value, "cache_clear", None)):
            seen.add(id(value))
            out.append(value)
    return out


def _resolve(path: str) -> Callable[[], Any]:
    if path not in _RESOLVED:
        module_name, _, attr = path.partition(":")
        if not module_name or not attr:
            raise ValueError(f"harness_cache_clearers: expected 'module:function', got {path!r}")
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
        if not callable(target):
            raise TypeError(f"harness_cache_clearers: {path!r} is not callable")
        _RESOLVED[path] = target
    return _RESOLVED[path]


def clear(clearers: tuple[str, ...] = ()) -> int:
    """Clear every discoverable cache of the watched modules; returns how many were cleared."""
    count = 0
    for name, module in watched(WATCHER):
        clean = WATCHER.clean.get(name)
        if clean is None:  # loaded before the watcher: look at it as it is now
            found = _caches(list(vars(module).values()))
        else:
            known = _FOUND.get(name)
            if known is None or known[0] is not clean:  # first look, or imported again
                known = _FOUND[name] = (clean, _caches(list(clean.attrs.values())))
            found = known[1]
        for cache in found:
            cache.cache_clear()
        count += len(found)
    for path in clearers:
        _resolve(path)()
        count += 1
    return count
