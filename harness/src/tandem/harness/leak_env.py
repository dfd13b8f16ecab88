"""Leak check: environment variables added, changed or removed by a test."""

from __future__ import annotations

import os


def snapshot() -> dict[str, str]:
    return dict(os.environ)


def diff(before: dict[str, str], ignore: frozenset[str] = frozenset()) -> list[str]:
    """Describe every change since ``before`` (names in ``ignore`` are not checked)."""
    now = os.environ
    out = []
    for name in sorted(set(before) | set(now)):
        if name in ignore:
            continue
        old, new = before.get(name), now.get(name)
        if old == new:
            continue
        if old is None:
            out.append(f"env var {name} was added (= {new!r})")
        elif new is None:
            out.append(f"env var {name} was removed (was {old!r})")
        else:
            out.append(f"env var {name} was changed from {old!r} to {new!r}")
    return out


def restore(before: dict[str, str], ignore: frozenset[str] = frozenset()) -> None:
    for name in set(os.environ) - set(before) - ignore:
        del os.environ[name]
    for name, value in before.items():
        if name not in ignore and os.environ.get(name) != value:
            os.environ[name] = value
