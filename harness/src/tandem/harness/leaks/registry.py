"""The list of leak kinds, and the snapshots that go through all of them at once.

A test's snapshot is one snapshot per kind, in the order of ``kinds``. Comparing undoes
each kind's leaks before the next kind looks (a stopped patcher puts its attribute back,
so the attribute check does not tell the same swap twice).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings import Settings
from .attributes import AttributeCheck
from .base import AnyCheck, Leak
from .env import EnvCheck
from .imports import OWN
from .patches import PatchCheck
from .processes import ProcessCheck
from .runtimes import ProcessGroupCheck, RayCheck
from .shm import ShmCheck
from .sockets import SocketCheck
from .threads import ThreadCheck
from .watcher import ImportWatcher

if TYPE_CHECKING:
    from .ops import OpRecorder

Snap = tuple[Any, ...]


def kinds(
    settings: Settings,
    watcher: ImportWatcher,
    recorder: OpRecorder | None,
    ignore_env: frozenset[str] = frozenset(),
    scratch: Path | None = None,
) -> list[AnyCheck]:
    """The checks a run uses, in order; a kind that has nothing to watch is left out.

    Building them sets up what they need (env write tracing, the probe for children, in a
    folder under ``scratch`` if given); ``Checks.close`` takes it down. A kind a run does
    not use is not even imported; ``recorder`` is needed with ``ops_namespace`` only.
    """
    prefixes = settings.watch_prefixes
    checks: list[AnyCheck] = [EnvCheck(prefixes, ignore_env), PatchCheck()]
    if prefixes:
        from .children import ChildProbeCheck

        # the children are asked before the process check ends the ones still running
        checks += [AttributeCheck(watcher), ChildProbeCheck(OWN, prefixes, scratch)]
    checks += [ProcessCheck(), ThreadCheck()]
    # distributed runtimes first: taking one down closes its sockets and segments
    checks += [ProcessGroupCheck(), RayCheck(), SocketCheck(), ShmCheck()]
    if settings.ops_namespace:
        from .ops import OpCheck

        if recorder is None:
            raise ValueError("kinds: ops_namespace is set, so an op recorder is needed")
        checks.append(OpCheck(recorder))
    return checks


def _undo(leaks: list[Leak]) -> list[Leak]:
    for leak in leaks:
        if leak.undo is not None:
            with contextlib.suppress(Exception):  # undoing must never hide the other leaks
                leak.undo()
    return leaks


class Checks:
    """Every kind at once: what a test or a wider fixture is checked with."""

    def __init__(self, checks: list[AnyCheck]) -> None:
        self.checks = checks

    def take(self) -> Snap:
        return tuple(check.snapshot() for check in self.checks)

    def compare(self, snap: Snap) -> list[str]:
        """Leaks since ``snap``, each undone where it can be."""
        out: list[str] = []
        for check, before in zip(self.checks, snap):
            out += [leak.text for leak in _undo(check.compare(before))]
        return out

    def absorb(self, snap: Snap, start: Snap, end: Snap) -> Snap:
        """``snap`` without what changed from ``start`` to ``end`` (a wider fixture at work)."""
        parts = zip(self.checks, snap, start, end)
        return tuple(check.absorb(s, a, b) for check, s, a, b in parts)

    def left_over(self, start: Snap, end: Snap) -> list[str]:
        """What of a wider fixture's change from ``start`` to ``end`` is left, each undone."""
        out: list[str] = []
        for check, a, b in zip(self.checks, start, end):
            out += [leak.text for leak in _undo(check.left_over(a, b))]
        return out

    def close(self) -> None:
        """Let the kinds that set something up (the probe's folders) take it down."""
        for check in self.checks:
            close = getattr(check, "close", None)
            if close is not None:
                close()
