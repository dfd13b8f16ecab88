"""Leak check: non-daemon threads a test started and left running."""

from __future__ import annotations

import threading


def _live() -> set[threading.Thread]:
    main = threading.main_thread()
    return {t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()}


def snapshot() -> set[threading.Thread]:
    return _live()


def diff(before: set[threading.Thread], grace: float = 0.2) -> list[str]:
    """Describe every non-daemon thread still alive (after a short grace period)."""
    leaked = _live() - before
    for thread in leaked:
        thread.join(grace / max(1, len(leaked)))
    return [
        f"non-daemon thread {t.name!r} is still alive"
        for t in sorted((t for t in leaked if t.is_alive()), key=lambda t: t.name)
    ]
