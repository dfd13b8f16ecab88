"""Fixtures wider than a test: what each one changed is its own, checked at its teardown.

When a module-, class-, package- or session-scoped fixture is set up, the state before and
after is compared: that change is the fixture's footprint and is taken off the current
test's account. When the fixture is torn down, whatever of its footprint is still there
(an env var it set, a process it started, a patch it made) is a leak of that fixture,
reported on the test whose teardown ended it, and undone. Every kind of leak takes part
through its ``absorb`` and ``left_over`` (``base.LeakCheck``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .registry import Checks, Snap


@dataclass(slots=True)
class Footprint:
    label: str
    before: Snap
    after: Snap


def wider(fixturedef: Any) -> bool:
    return getattr(fixturedef, "scope", "function") != "function"


def label(fixturedef: Any, nodeid: str) -> str:
    return f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope, set up for {nodeid})"


class Scopes:
    """The footprints of the wider fixtures alive in this process."""

    def __init__(self, checks: Checks) -> None:
        self.checks = checks
        self.footprints: dict[int, Footprint] = {}
        self.teardown: dict[int, Snap] = {}  # state just before a fixture's teardown code

    def set_up(self, fixturedef: Any, nodeid: str, before: Snap, after: Snap) -> None:
        """Remember what a wider fixture's setup changed, to check it when it is torn down."""
        self.footprints[id(fixturedef)] = Footprint(label(fixturedef, nodeid), before, after)

    def tearing_down(self, fixturedef: Any) -> None:
        self.teardown[id(fixturedef)] = self.checks.take()

    def torn_down(self, fixturedef: Any) -> tuple[Snap | None, list[str]]:
        """The snapshot taken before its teardown, and the leaks of the fixture just torn down."""
        before_teardown = self.teardown.pop(id(fixturedef), None)
        footprint = self.footprints.pop(id(fixturedef), None)
        if footprint is None:
            return before_teardown, []
        leaks = self.checks.left_over(footprint.before, footprint.after)
        return before_teardown, [f"{footprint.label}: {leak}" for leak in leaks]
