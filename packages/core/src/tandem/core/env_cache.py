"""``env_cache``: a memoizing decorator that cannot return a stale, env-dependent answer.

A plain ``functools.lru_cache`` on a function that reads an env var keeps answering
with the value it saw first, even after the variable changed (the attention backend of
one engine leaking into another). ``@env_cache("VAR", ...)`` adds the current values of
the named variables to every key, and registers the cache so that it can be listed and
cleared (the test harness clears all of them at every isolation boundary).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: weakref.WeakSet[EnvCached] = weakref.WeakSet()
_MISSING = object()
# os.environ's own table (encoded names -> encoded values), read directly: a cached call
# runs once per linear layer and token, and os.environ.get re-encodes the name each time.
# Every change through os.environ lands there; without it (not CPython) .get is used.
_TABLE: dict[Any, Any] | None = getattr(os.environ, "_data", None)
_ENCODE: Callable[[str], Any] = getattr(os.environ, "encodekey", lambda name: name)


class EnvCached:
    """The wrapper ``env_cache`` returns; call it like the function it wraps."""

    def __init__(self, fn: Callable[..., Any], var_names: tuple[str, ...]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.var_names = var_names
        self._values: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self._encoded = tuple(_ENCODE(name) for name in var_names)
        self.hits = 0
        self.misses = 0

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
        if _TABLE is not None:
            env = tuple(map(_TABLE.get, self._encoded))
        else:
            env = tuple(os.environ.get(name) for name in self.var_names)
        return (env, args, tuple(sorted(kwargs.items()))) if kwargs else (env, args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = self._key(args, kwargs)
        value = self._values.get(key, _MISSING)  # a dict read needs no lock
        if value is not _MISSING:
            self.hits += 1  # a count for reports: a lost increment under threads is harmless
            return value
        value = self.fn(*args, **kwargs)
        with self._lock:
            self.misses += 1
            self._values[key] = value
        return value

    def cache_clear(self) -> None:
        with self._lock:
            self._values.clear()
            self.hits = self.misses = 0

    def cache_len(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"<env_cache({', '.join(self.var_names)}) {self.__module__}.{self.__qualname__}>"


def env_cache(*var_names: str) -> Callable[[F], F]:
    """Memoize a function on its arguments and on the current values of ``var_names``."""
    for name in var_names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"env_cache: variable names must be non-empty strings, got {name!r}")

    def wrap(fn: F) -> F:
        cached = EnvCached(fn, var_names)
        _REGISTRY.add(cached)
        return cached  # type: ignore[return-value]

    return wrap


def registered_caches() -> list[EnvCached]:
    """Every live ``env_cache`` cache, in a stable order."""
    return sorted(_REGISTRY, key=lambda c: (c.__module__, c.__qualname__))


def clear_all() -> int:
    """Clear every registered cache; returns how many there were."""
    caches = registered_caches()
    for cache in caches:
        cache.cache_clear()
    return len(caches)
