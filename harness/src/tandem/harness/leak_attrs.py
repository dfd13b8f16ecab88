"""Leak check: attributes of watched modules replaced during a test (a patch never undone).

Only callables, classes and modules are tracked: they are what ``mock.patch`` swaps, while
plain data (counters, flags) legitimately changes. Replaced attributes are put back.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

Snapshot = dict[tuple[str, str], Any]
OWN = __name__.rpartition(".")[0]  # the harness itself is never watched


_CACHE: dict[tuple[str, ...], tuple[int, list[str]]] = {}


def watched(prefixes: tuple[str, ...]) -> list[tuple[str, types.ModuleType]]:
    """Loaded modules whose names start with one of ``prefixes`` (never the harness).

    The name scan is redone only when the number of loaded modules changed (tests run
    often, imports are rare; thousands of modules are loaded once torch is).
    """
    if not prefixes:
        return []
    count = len(sys.modules)
    cached = _CACHE.get(prefixes)
    if cached is None or cached[0] != count:
        dotted = tuple(p + "." for p in prefixes)
        names = [
            n
            for n in list(sys.modules)
            if (n in prefixes or n.startswith(dotted)) and n != OWN and not n.startswith(OWN + ".")
        ]
        _CACHE[prefixes] = cached = (count, names)
    out = []
    for name in cached[1]:
        module = sys.modules.get(name)
        if module is not None:
            out.append((name, module))
    return out


def _tracked(value: Any) -> bool:
    return callable(value) or isinstance(value, types.ModuleType)


def _is_mock(value: Any) -> bool:
    return type(value).__module__ == "unittest.mock"


def snapshot_module(name: str, module: types.ModuleType) -> Snapshot:
    return {(name, attr): value for attr, value in list(vars(module).items()) if _tracked(value)}


def snapshot(prefixes: tuple[str, ...]) -> Snapshot:
    out: Snapshot = {}
    for name, module in watched(prefixes):
        out.update(snapshot_module(name, module))
    return out


def _submodule(name: str, attr: str, value: Any) -> bool:
    """The import system binding ``name.attr`` to the submodule just imported: no patch."""
    return isinstance(value, types.ModuleType) and value.__name__ == f"{name}.{attr}"


def diff(before: Snapshot, prefixes: tuple[str, ...], restore: bool = True) -> list[str]:
    """Describe every tracked attribute that is no longer the object it was; put it back."""
    out = []
    missing = object()
    for (name, attr), old in before.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        new = vars(module).get(attr, missing)
        if new is old or _submodule(name, attr, new):
            continue
        now = "deleted" if new is missing else f"replaced by {new!r}"[:200]
        out.append(f"{name}.{attr} was {now} (a patch that was never undone?)")
        if restore:
            setattr(module, attr, old)
    for name, module in watched(prefixes):
        for attr, value in list(vars(module).items()):
            if (name, attr) not in before and _is_mock(value):
                out.append(f"{name}.{attr} was added as {value!r} (a patch with create=True?)")
                if restore:
                    delattr(module, attr)
    return out


def active_patches() -> list[Any]:
    mock = sys.modules.get("unittest.mock")
    patch = getattr(mock, "_patch", None)
    return list(getattr(patch, "_active_patches", []))


def diff_patches(before: list[Any], stop: bool = True) -> list[str]:
    """Describe (and stop) every ``mock.patch(...).start()`` left active by the test."""
    out = []
    for patcher in active_patches():
        if any(patcher is p for p in before):
            continue
        target = getattr(patcher, "getter", lambda: "?")
        try:
            where = f"{target().__name__}.{patcher.attribute}"
        except Exception:
            where = str(getattr(patcher, "attribute", "?"))
        out.append(f"unittest.mock patch of {where} is still active")
        if stop:
            with contextlib.suppress(Exception):
                patcher.stop()
    return out
