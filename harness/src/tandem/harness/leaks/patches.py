"""Leak check: ``mock.patch(...).start()`` patchers a test left active (they are stopped)."""

from __future__ import annotations

from typing import Any

from .base import Leak
from .watcher import active_patches, describe_patch

Patchers = tuple[Any, ...]


def _new(now: list[Any], before: Patchers) -> list[Any]:
    return [p for p in now if not any(p is q for q in before)]


class PatchCheck:
    """Stopping a patcher puts its attribute back, so this runs before ``AttributeCheck``."""

    def snapshot(self) -> Patchers:
        return tuple(active_patches())

    def compare(self, before: Patchers) -> list[Leak]:
        return [Leak(describe_patch(p), p.stop) for p in _new(active_patches(), before)]

    def absorb(self, snap: Patchers, start: Patchers, end: Patchers) -> Patchers:
        return (*snap, *_new(list(end), start))

    def left_over(self, start: Patchers, end: Patchers) -> list[Leak]:
        started = _new(list(end), start)
        alive = [p for p in active_patches() if any(p is q for q in started)]
        return [Leak(describe_patch(p), p.stop) for p in alive]
