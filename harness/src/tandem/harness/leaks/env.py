"""Leak check: environment variables added, changed or removed by a test, and env writes.

A value compared before and after cannot see a write of the value a variable already had
(code that sets the engine variable the harness had set to that very engine). So writes to
``os.environ`` made by code under test (a frame of a watched module on the stack) are
logged with where they were made, and a write still in effect at the end is a leak even
when the value did not change.

Snapshots copy ``os.environ``'s own storage (encoded keys and values), so a test that
changed nothing costs one dict copy and one comparison, with no decoding.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .base import Leak

_OWN = __name__.rpartition(".")[0].rpartition(".")[0]  # the harness's own frames never count


@dataclass(slots=True, frozen=True)
class Write:
    name: str
    value: str | None  # None: deleted
    origin: str  # "file:line (module)"


@dataclass(slots=True, frozen=True)
class EnvSnap:
    raw: dict[Any, Any]  # a copy of os.environ's storage
    writes: int  # position in the write log
    skip: tuple[tuple[int, int], ...] = ()  # write-log ranges that were wider fixtures'


def _raw() -> dict[Any, Any]:
    data = getattr(os.environ, "_data", None)
    return dict(data if isinstance(data, dict) else os.environ)


def _text(raw: dict[Any, Any]) -> dict[str, str]:
    return {os.fsdecode(k): os.fsdecode(v) for k, v in raw.items()}


def _watched(module: str, prefixes: tuple[str, ...]) -> bool:
    if module == _OWN or module.startswith(_OWN + "."):
        return False
    return any(module == p or module.startswith(p + ".") for p in prefixes)


class WriteLog:
    """Writes to ``os.environ`` made by code in modules under ``prefixes``, in order.

    ``os.environ``'s class is wrapped once per process; the wrappers tell every log that is
    installed (the class's ``_harness_logs``), so the log itself is this object's.
    """

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes
        self.writes: list[Write] = []
        if prefixes:
            _trace().append(self)

    def close(self) -> None:
        logs = getattr(type(os.environ), "_harness_logs", [])
        if self in logs:
            logs.remove(self)

    def writer(self, frame: Any) -> str | None:
        """Where the innermost frame of watched code that led to this write is, if any."""
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if isinstance(module, str) and _watched(module, self.prefixes):
                return f"{frame.f_code.co_filename}:{frame.f_lineno} ({module})"
            frame = frame.f_back
        return None

    def since(self, start: int, skip: Sequence[tuple[int, int]] = ()) -> dict[str, Write]:
        """The last write to each variable since ``start``, leaving out the ``skip`` ranges."""
        last: dict[str, Write] = {}
        for index in range(start, len(self.writes)):
            if any(lo <= index < hi for lo, hi in skip):
                continue
            write = self.writes[index]
            last[write.name] = write
        return last


def _trace() -> list[WriteLog]:
    """Wrap ``os.environ``'s writes (once per process); the list of logs they tell."""
    cls: Any = type(os.environ)
    logs: list[WriteLog] | None = cls.__dict__.get("_harness_logs")
    if logs is not None:
        return logs
    logs = cls._harness_logs = []

    def wrap(original: Callable[..., None], deleting: bool) -> Callable[..., None]:
        def traced(self: Any, key: str, *value: str) -> None:
            original(self, key, *value)
            if not logs or self is not os.environ:
                return
            frame = sys._getframe(1)
            for log in list(logs):
                origin = log.writer(frame)
                if origin is not None:
                    log.writes.append(Write(key, None if deleting else value[0], origin))

        traced.__name__ = original.__name__
        traced.__qualname__ = original.__qualname__
        return traced

    cls.__setitem__ = wrap(cls.__setitem__, False)
    cls.__delitem__ = wrap(cls.__delitem__, True)
    return logs


def _put_back(name: str, value: str | None) -> Callable[[], None]:
    def undo() -> None:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    return undo


class EnvCheck:
    """Env vars, every one of them, the engine variable too: a test's change is named and
    undone. Names in ``ignore`` (pytest's own ``PYTEST_CURRENT_TEST``) are not compared."""

    def __init__(self, prefixes: tuple[str, ...], ignore: frozenset[str] = frozenset()) -> None:
        self.ignore = ignore
        self.log = WriteLog(prefixes)

    def close(self) -> None:
        self.log.close()

    def snapshot(self) -> EnvSnap:
        return EnvSnap(_raw(), len(self.log.writes))

    def compare(self, before: EnvSnap) -> list[Leak]:
        now_raw = _raw()
        if now_raw == before.raw and len(self.log.writes) == before.writes:
            return []
        old_env, now = _text(before.raw), _text(now_raw)
        written = self.log.since(before.writes, before.skip)
        out = []
        for name in sorted(set(old_env) | set(now) | set(written)):
            old, new = old_env.get(name), now.get(name)
            write = written.get(name)
            by = f" by {write.origin}" if write is not None else ""
            if old != new and name not in self.ignore:
                if old is None:
                    text = f"env var {name} was added (= {new!r}){by}"
                elif new is None:
                    text = f"env var {name} was removed (was {old!r}){by}"
                else:
                    text = f"env var {name} was changed from {old!r} to {new!r}{by}"
                out.append(Leak(text, _put_back(name, old)))
            elif old == new is not None and write is not None and write.value == new:
                out.append(
                    Leak(
                        f"env var {name} was written{by} (= {new!r}) and never restored; "
                        "it held that value already, so only the write shows"
                    )
                )
        return out

    def absorb(self, snap: EnvSnap, start: EnvSnap, end: EnvSnap) -> EnvSnap:
        raw = dict(snap.raw)
        for key in set(start.raw) | set(end.raw):
            if start.raw.get(key) != end.raw.get(key):
                if key in end.raw:
                    raw[key] = end.raw[key]
                else:
                    raw.pop(key, None)
        return EnvSnap(raw, snap.writes, (*snap.skip, (start.writes, end.writes)))

    def left_over(self, start: EnvSnap, end: EnvSnap) -> list[Leak]:
        before, after, now = _text(start.raw), _text(end.raw), os.environ
        out = []
        for name in sorted(set(before) | set(after)):
            old, current = before.get(name), now.get(name)
            if old != after.get(name) and current != old:
                was = "unset" if old is None else repr(old)
                is_now = "unset" if current is None else repr(current)
                text = f"env var {name} is still {is_now} (it was {was} before the fixture)"
                out.append(Leak(text, _put_back(name, old)))
        for name, write in self.log.since(start.writes, [(end.writes, 1 << 62)]).items():
            if write.value is not None and now.get(name) == write.value == before.get(name):
                out.append(Leak(f"env var {name} was written by {write.origin} and never restored"))
        return out
