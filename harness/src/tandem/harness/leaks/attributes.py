"""Leak check: attributes of watched modules that are no longer their clean objects.

The reference is each module's *clean* state (``watcher``): its tracked attributes right
after its import. A ``mock.patch`` that outlived its test, an assignment, an attribute
added as a mock: each is named and put back. Modules a test imported are checked the same
way, against the state their own import left.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from .base import Leak
from .watcher import MISSING, CleanState, ImportWatcher, put_back

Key = tuple[str, str]  # (module, attribute)
Dirty = dict[Key, Any]  # attributes not in their clean state -> the object they hold now


def watched(watcher: ImportWatcher) -> list[tuple[str, types.ModuleType]]:
    """Loaded modules the watcher watches (the name scan reruns only when imports happened)."""
    if not watcher.prefixes:
        return []
    count = len(sys.modules)
    prefixes, seen, names = watcher.scanned
    if prefixes != watcher.prefixes or seen != count:
        names = [n for n in list(sys.modules) if watcher.watched(n)]
        watcher.scanned = (watcher.prefixes, count, names)
    out = []
    for name in names:
        module = sys.modules.get(name)
        if isinstance(module, types.ModuleType):
            out.append((name, module))
    return out


def _clean(watcher: ImportWatcher, name: str, module: types.ModuleType) -> CleanState:
    """The module's clean state; one loaded before the watcher was installed is clean now."""
    clean = watcher.clean.get(name)
    if clean is None:
        clean = watcher.clean[name] = CleanState(module)
    return clean


def changes(watcher: ImportWatcher) -> list[tuple[Key, str, Any]]:
    """``((module, attr), description, clean object)`` of every attribute not clean now."""
    out = []
    for name, module in watched(watcher):
        clean = _clean(watcher, name, module)
        if not clean.intact(module):
            out += [((name, attr), text, old) for attr, text, old in clean.changes(name, module)]
    return out


def dirty(watcher: ImportWatcher) -> Dirty:
    """The attributes of watched modules not in their clean state, with what they hold."""
    out: Dirty = {}
    for (name, attr), _, _ in changes(watcher):
        out[(name, attr)] = vars(sys.modules[name]).get(attr, MISSING)
    return out


def _undo(key: Key, old: Any) -> Callable[[], None]:
    def undo() -> None:
        module = sys.modules.get(key[0])
        if module is not None:
            put_back(module, key[1], old)

    return undo


def now(key: Key) -> Any:
    """What the attribute ``key`` holds now (``MISSING`` if nothing)."""
    module = sys.modules.get(key[0])
    return MISSING if module is None else vars(module).get(key[1], MISSING)


def _describe(key: Key, now: Any) -> str:
    what = "deleted" if now is MISSING else f"replaced by {now!r}"[:200]
    return f"{key[0]}.{key[1]} was {what} (a patch that was never undone?)"


class AttributeCheck:
    """Snapshots hold only what is not clean (usually nothing); clean is the reference."""

    def __init__(self, watcher: ImportWatcher) -> None:
        self.watcher = watcher

    def snapshot(self) -> Dirty:
        return dirty(self.watcher)

    def compare(self, before: Dirty) -> list[Leak]:
        out = []
        seen = set()
        for key, text, old in changes(self.watcher):
            seen.add(key)
            if key in before:
                if now(key) is before[key]:
                    continue  # it held this when the test started
                text, old = _describe(key, now(key)), before[key]
            out.append(Leak(text, _undo(key, old)))
        for key, was in before.items():  # put back to clean by the test: still a change
            if key not in seen:
                out.append(Leak(_describe(key, now(key)), _undo(key, was)))
        return out

    def absorb(self, snap: Dirty, start: Dirty, end: Dirty) -> Dirty:
        out = dict(snap)
        for key in set(start) | set(end):
            if start.get(key, MISSING) is not end.get(key, MISSING):
                if key in end:
                    out[key] = end[key]
                else:
                    out.pop(key, None)
        return out

    def left_over(self, start: Dirty, end: Dirty) -> list[Leak]:
        out = []
        for key in set(start) | set(end):
            if start.get(key, MISSING) is end.get(key, MISSING):
                continue
            was = start[key] if key in start else self._clean_object(key)
            if now(key) is not was:
                out.append(Leak(_describe(key, now(key)), _undo(key, was)))
        return out

    def _clean_object(self, key: Key) -> Any:
        clean = self.watcher.clean.get(key[0])
        return MISSING if clean is None else clean.attrs.get(key[1], MISSING)
