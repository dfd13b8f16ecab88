"""Cache clearing at isolation and engine boundaries.

Discovered duck-typed (any object with ``cache_clear`` in a watched module: lru_cache,
cache, env_cache) plus the callables configured in ``harness_cache_clearers``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .attributes import watched
from .imports import WATCHER

_RESOLVED: dict[str, Callable[[], Any]] = {}


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
    seen: set[int] = set()
    for _, module in watched(WATCHER):
        for value in list(vars(module).values()):
            clear_fn = getattr(value, "cache_clear", None)
            if callable(clear_fn) and id(value) not in seen and not isinstance(value, type):
                seen.add(id(value))
                clear_fn()
                count += 1
    for path in clearers:
        _resolve(path)()
        count += 1
    return count
