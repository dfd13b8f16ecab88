"""Leak check: environment variables added, changed or removed by a test, and env writes.

A value compared before and after cannot see a write of the value a variable already had
(code that sets the engine variable the harness had set to that very engine). So writes to
``os.environ`` made by code under test (a frame of a watched module on the stack) are
logged with where they were made, and a write still in effect at the end is a leak even
when the value did not change.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_OWN = __name__.rpartition(".")[0]


@dataclass(slots=True, frozen=True)
class Write:
    name: str
    value: str | None  # None: deleted
    origin: str  # "file:line (module)"


WRITES: list[Write] = []
_PREFIXES: list[tuple[str, ...]] = []


def snapshot() -> dict[str, str]:
    return dict(os.environ)


def mark() -> int:
    """A position in the write log."""
    return len(WRITES)


def _watched(module: str, prefixes: tuple[str, ...]) -> bool:
    if module == _OWN or module.startswith(_OWN + "."):
        return False
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _writer() -> str | None:
    """Where the innermost frame of watched code that led to this write is, if any."""
    prefixes = _PREFIXES[0] if _PREFIXES else ()
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if isinstance(module, str) and _watched(module, prefixes):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} ({module})"
        frame = frame.f_back
    return None


def trace(prefixes: tuple[str, ...]) -> None:
    """Log writes to ``os.environ`` made by code in modules under ``prefixes`` (once)."""
    _PREFIXES[:] = [prefixes]
    cls: Any = type(os.environ)
    if not prefixes or getattr(cls, "_harness_traced", False):
        return
    cls._harness_traced = True

    def wrap(original: Callable[..., None], deleting: bool) -> Callable[..., None]:
        def traced(self: Any, key: str, *value: str) -> None:
            original(self, key, *value)
            origin = _writer()
            if origin is not None and self is os.environ:
                WRITES.append(Write(key, None if deleting else value[0], origin))

        traced.__name__ = original.__name__
        traced.__qualname__ = original.__qualname__
        return traced

    cls.__setitem__ = wrap(cls.__setitem__, False)
    cls.__delitem__ = wrap(cls.__delitem__, True)


def writes(start: int, skip: Sequence[tuple[int, int]] = ()) -> dict[str, Write]:
    """The last write to each variable since ``start``, leaving out the ``skip`` ranges."""
    last: dict[str, Write] = {}
    for index in range(start, len(WRITES)):
        if any(lo <= index < hi for lo, hi in skip):
            continue
        write = WRITES[index]
        last[write.name] = write
    return last


def diff(
    before: dict[str, str],
    ignore: frozenset[str] = frozenset(),
    written: dict[str, Write] | None = None,
) -> list[str]:
    """Describe every change since ``before`` and every write still in effect.

    Names in ``ignore`` are not compared by value, but a write to them is still reported.
    """
    now = os.environ
    written = written or {}
    out = []
    for name in sorted(set(before) | set(now) | set(written)):
        old, new = before.get(name), now.get(name)
        write = written.get(name)
        by = f" by {write.origin}" if write is not None else ""
        if old != new and name not in ignore:
            if old is None:
                out.append(f"env var {name} was added (= {new!r}){by}")
            elif new is None:
                out.append(f"env var {name} was removed (was {old!r}){by}")
            else:
                out.append(f"env var {name} was changed from {old!r} to {new!r}{by}")
        elif write is not None and write.value is not None and new == write.value:
            out.append(
                f"env var {name} was written{by} (= {new!r}) and never restored; "
                "it held that value already, so only the write shows"
            )
    return out


def restore(before: dict[str, str], ignore: frozenset[str] = frozenset()) -> None:
    for name in set(os.environ) - set(before) - ignore:
        del os.environ[name]
    for name, value in before.items():
        if name not in ignore and os.environ.get(name) != value:
            os.environ[name] = value
