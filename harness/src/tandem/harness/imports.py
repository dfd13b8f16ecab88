"""Patches made at import time, and hooks that run as soon as a module is imported.

The per-test checks compare against a snapshot taken when a test starts, so a
``mock.patch(...).start()`` or an assignment executed while an engine module or a test
module is imported would be invisible to them: every test would run with the swap. A
finder at the front of ``sys.meta_path`` therefore records the attributes of every watched
module the moment its own code has run (its *clean* state). Whatever changes a module's
clean state later is a patch: during a watched import (a preload, a test module) it fails
the run at the end of collection, naming the import; during a test it is that test's leak.

The same finder runs callbacks right after a module is imported (``on_import``): the op
recorder is installed the moment torch is loaded, even when a test loads it lazily.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from . import leak_attrs

CLEAN: dict[str, leak_attrs.Snapshot] = {}  # module name -> attributes right after its import
LOADED: list[str] = []  # watched modules in the order their import finished
_CALLBACKS: dict[str, list[Callable[[], None]]] = {}


class _Loader(importlib.abc.Loader):
    """Wraps a module's real loader to see the moment its code has run."""

    def __init__(self, inner: Any, finder: _Finder) -> None:
        self.inner = inner
        self.finder = finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.inner  # the module never sees the wrapper
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self.inner
        self.inner.exec_module(module)
        self.finder.loaded(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.prefixes: tuple[str, ...] = ()
        self.busy: set[str] = set()

    def watched(self, name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in self.prefixes) and not (
            name == leak_attrs.OWN or name.startswith(leak_attrs.OWN + ".")
        )

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name in self.busy or not (name in _CALLBACKS or self.watched(name)):
            return None
        self.busy.add(name)
        try:
            spec = _real_spec(self, name, path, target)
        finally:
            self.busy.discard(name)
        loader = getattr(spec, "loader", None)
        if spec is not None and loader is not None and hasattr(loader, "exec_module"):
            spec.loader = _Loader(loader, self)
        return spec

    def loaded(self, module: ModuleType) -> None:
        name = module.__name__
        if self.watched(name):
            CLEAN[name] = leak_attrs.snapshot_module(name, module)
            LOADED.append(name)
        for callback in _CALLBACKS.pop(name, []):
            with contextlib.suppress(Exception):  # a hook must never break an import
                callback()


def _real_spec(
    me: _Finder, name: str, path: Sequence[str] | None, target: ModuleType | None
) -> ModuleSpec | None:
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if finder is me or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            return spec
    return None


_FINDER = _Finder()


def install(prefixes: tuple[str, ...]) -> None:
    """Put the finder first on ``sys.meta_path`` (once), watching modules under ``prefixes``."""
    _FINDER.prefixes = tuple(dict.fromkeys((*_FINDER.prefixes, *prefixes)))
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def on_import(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` now if ``name`` is imported, else right after its import."""
    if name in sys.modules:
        callback()
        return
    _CALLBACKS.setdefault(name, []).append(callback)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def mark() -> int:
    """A position in the log of finished imports."""
    return len(LOADED)


def changed(since: int, skip: set[str] = frozenset(), restore: bool = True) -> list[str]:
    """Changes to modules imported since ``since`` against their clean state."""
    out: list[str] = []
    for name in dict.fromkeys(LOADED[since:]):
        if name not in skip and name in CLEAN:
            out += leak_attrs.diff(CLEAN[name], (), restore=restore)
    return out


def since_import(restore: bool = False) -> list[str]:
    """Every watched module whose attributes are no longer those its import left."""
    return changed(0, restore=restore)


@contextlib.contextmanager
def watch(what: str, prefixes: tuple[str, ...], problems: list[str]) -> Iterator[None]:
    """Record in ``problems`` what importing ``what`` changed in watched modules."""
    if not prefixes:
        yield
        return
    install(prefixes)
    before = leak_attrs.snapshot(prefixes)
    patches = leak_attrs.active_patches()
    start = mark()
    try:
        yield
    finally:
        found = leak_attrs.diff_patches(patches, stop=False)
        found += leak_attrs.diff(before, prefixes, restore=False)
        found += changed(start, {name for name, _ in before}, restore=False)
        problems += [f"{change} (while importing {what})" for change in dict.fromkeys(found)]
