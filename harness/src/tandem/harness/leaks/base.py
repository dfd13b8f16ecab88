"""The one protocol every kind of leak implements, and what a found leak is.

A kind (env vars, processes, patches, ...) is one class with four methods; the registry
lists the kinds, and everything that runs checks (around a test, around a wider
fixture) goes through this protocol, so adding a kind touches one module and one list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

S = TypeVar("S")


@dataclass(frozen=True)
class Leak:
    """One thing left behind: how it is described, and how it is undone (if it can be)."""

    text: str
    undo: Callable[[], object] | None = None


class LeakCheck(Protocol[S]):
    """One kind of state a test can leave behind.

    ``S`` is the kind's snapshot. Nothing is undone by the check itself: the caller
    undoes each ``Leak`` it got, in both ``fail`` and ``warn`` modes.
    """

    def snapshot(self) -> S:
        """The state now, as ``compare`` needs it later (cheap: it runs twice per test)."""
        ...

    def compare(self, before: S) -> list[Leak]:
        """What changed since ``before`` and is still in effect."""
        ...

    def absorb(self, snap: S, start: S, end: S) -> S:
        """``snap`` with the change from ``start`` to ``end`` taken off its account.

        A wider fixture set up (or torn down) while a test ran made that change: it is
        the fixture's, checked at the fixture's teardown, not the test's.
        """
        ...

    def left_over(self, start: S, end: S) -> list[Leak]:
        """At a wider fixture's teardown: what of its change ``start`` -> ``end`` remains."""
        ...


AnyCheck = LeakCheck[Any]
