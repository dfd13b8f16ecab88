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
from .watcher import ImportWatcher


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
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"harness_cache_clearers: expected 'module:function', got {path!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"harness_cache_clearers: {path!r} is not callable")
    return target


class CacheClearer:
    """Clears the caches of one watcher's modules and the configured clearers."""

    def __init__(self, watcher: ImportWatcher, clearers: tuple[str, ...] = ()) -> None:
        self.watcher = watcher
        self.clearers = clearers
        self.resolved: dict[str, Callable[[], Any]] = {}
        self.found: dict[str, tuple[Any, list[Any]]] = {}  # module -> (clean state, caches)

    def clear(self) -> int:
        """Clear every discoverable cache of the watched modules; returns how many."""
        count = 0
        for name, module in watched(self.watcher):
            clean = self.watcher.clean.get(name)
            if clean is None:  # loaded before the watcher: look at it as it is now
                found = _caches(list(vars(module).values()))
            else:
                known = self.found.get(name)
                if known is None or known[0] is not clean:  # first look, or imported again
                    known = self.found[name] = (clean, _caches(list(clean.attrs.values())))
                found = known[1]
            for cache in found:
                cache.cache_clear()
            count += len(found)
        for path in self.clearers:
            if path not in self.resolved:
                self.resolved[path] = _resolve(path)
            self.resolved[path]()
            count += 1
        return count
