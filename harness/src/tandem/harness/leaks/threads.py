"""Leak check: non-daemon threads a test started and left running (named, not stopped)."""

from __future__ import annotations

import threading

from .base import Leak

Threads = frozenset[threading.Thread]


def _live() -> Threads:
    main = threading.main_thread()
    if threading.active_count() == 1 and threading.current_thread() is main:
        return frozenset()  # the main thread alone: most tests start none
    return frozenset(
        t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()
    )


def _still_alive(threads: Threads, grace: float) -> list[threading.Thread]:
    """Those of ``threads`` still alive after a short grace shared among them."""
    for thread in threads:
        thread.join(grace / max(1, len(threads)))
    return sorted((t for t in threads if t.is_alive()), key=lambda t: t.name)


class ThreadCheck:
    def __init__(self, grace: float = 0.2) -> None:
        self.grace = grace

    def snapshot(self) -> Threads:
        return _live()

    def compare(self, before: Threads) -> list[Leak]:
        leaked = _still_alive(_live() - before, self.grace)
        return [Leak(f"non-daemon thread {t.name!r} is still alive") for t in leaked]

    def absorb(self, snap: Threads, start: Threads, end: Threads) -> Threads:
        return snap | (end - start)

    def left_over(self, start: Threads, end: Threads) -> list[Leak]:
        leaked = _still_alive(frozenset(t for t in end - start if t.is_alive()), self.grace)
        return [Leak(f"non-daemon thread {t.name!r} it started is still alive") for t in leaked]
