"""The role of a process that runs tests itself: the harness's state around each test.

Before a test: caches are cleared at a boundary (a fresh process, a new engine), the engine
variable is set, the seeds are reset and every leak kind takes its snapshot. After its
teardown the snapshot is compared, each leak is undone and named on the teardown report.
A wider fixture's setup and teardown are taken off the test's account (``leaks.scopes``).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..leaks import registry
from ..leaks.caches import CacheClearer
from ..leaks.registry import Checks, Snap
from ..leaks.scopes import Scopes, wider
from . import seeds
from .markers import engine_of
from .state import RunState

SNAP = pytest.StashKey[Snap]()
SAVED = pytest.StashKey[tuple[str, str | None]]()


class TesterRole:
    def __init__(self, run: RunState, scratch: Path | None = None) -> None:
        self.run = run
        settings = run.settings
        # the engine variable is compared like any other: the harness sets it before the
        # snapshot, so what differs at the end is the test's own write (named, undone)
        ignore = frozenset({"PYTEST_CURRENT_TEST"})
        harness = run.harness
        recorder = harness.ops if settings.ops_namespace else None
        kinds = registry.kinds(settings, harness.watcher, recorder, ignore, scratch)
        self.checks = Checks(kinds)
        self.caches = CacheClearer(harness.watcher, settings.cache_clearers)
        self.reseed = seeds.Reseeder()
        self.scopes = Scopes(self.checks)
        self.boundary = True  # caches are cleared before the next test
        self.last_engine: str | None = None
        self.current: Snap | None = None  # the snapshot of the test being run
        self.current_test = ""
        self.fixture_leaks: list[str] = []  # wider fixtures' leaks, not yet told

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        settings = self.run.settings
        name = engine_of(item)
        if self.boundary or name != self.last_engine:
            self.caches.clear()
            self.boundary, self.last_engine = False, name
        if name is not None and ("engine", name) not in item.user_properties:
            item.user_properties.append(("engine", name))
        if name is not None and settings.engine_env:
            item.stash[SAVED] = (settings.engine_env, os.environ.get(settings.engine_env))
            os.environ[settings.engine_env] = name
        self.reseed(self.run.seed)
        self.current = item.stash[SNAP] = self.checks.take()
        self.current_test = item.nodeid
        self.fixture_leaks = []
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: Any, request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        """A wider fixture's setup: its changes are its own, not the current test's."""
        if self.current is None or not wider(fixturedef):
            return (yield)
        before = self.checks.take()
        try:
            return (yield)
        finally:
            after = self.checks.take()
            self.current = self.checks.absorb(self.current, before, after)
            self.scopes.set_up(fixturedef, self.current_test, before, after)
            fixturedef.addfinalizer(lambda: self.scopes.tearing_down(fixturedef))

    def pytest_fixture_post_finalizer(self, fixturedef: Any, request: Any) -> None:
        """A wider fixture was torn down: what it left behind is its leak; its undoing is not
        the test's."""
        if not wider(fixturedef):
            return
        before, leaks = self.scopes.torn_down(fixturedef)
        if self.current is not None and before is not None:
            self.current = self.checks.absorb(self.current, before, self.checks.take())
        self.fixture_leaks.extend(leaks)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "teardown":
            self._after_teardown(item, report)
        if report.failed:
            seed = self.run.seed
            report.sections.append(("harness", f"seed {seed} (replay: --harness-seed {seed})"))
        return report

    def _after_teardown(self, item: pytest.Item, report: pytest.TestReport) -> None:
        snap = item.stash.get(SNAP, None)
        if snap is not None and self.current is not None and self.current_test == item.nodeid:
            snap = self.current  # with the wider fixtures' changes taken off
        leaks = self.checks.compare(snap) if snap is not None else []
        leaks += self.fixture_leaks
        self.fixture_leaks = []
        self.current = None
        saved = item.stash.get(SAVED, None)
        if saved is not None:
            var, value = saved
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        if leaks:
            blame(item.nodeid, report, leaks, self.run.settings.leaks)

    def pytest_unconfigure(self) -> None:
        self.checks.close()


def blame(nodeid: str, report: pytest.TestReport, leaks: list[str], mode: str) -> None:
    """Fail the teardown report with the leaks (``fail``), or attach them to it (``warn``)."""
    text = f"leak check: {nodeid} left state behind:\n" + "\n".join(f"  - {x}" for x in leaks)
    if mode == "warn":
        report.sections.append(("harness leaks (warn)", text))
        report.user_properties.extend(("harness_leak", leak) for leak in leaks)
        return
    report.outcome = "failed"
    if report.longrepr is None:
        report.longrepr = text
    else:
        report.sections.append(("harness leaks", text))
