"""The role of a child process: every report and warning of its tests goes to the parent.

A forked child was the pytest process a moment ago: ``enter`` drops the roles it no longer
plays (the test loop, collection, reporting) and takes this one. A spawned child is a new
pytest told ``--harness-worker``: ``SpawnedChildRole`` serves tests instead of pytest's
own loop.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..isolation import subtests
from ..isolation.child import Channel, serve
from .state import CHILD, COLLECTION, LOOP, REPORT, TESTER


class ChildRole:
    """Sends the report of each phase, and every report a plugin logs during a test.

    A report made while a phase runs is a plugin's own (pytest's ``subtests`` makes one per
    subtest, turns it into a ``SubtestReport`` and logs that): what goes to the parent is
    what gets logged, once, as plain pytest would log it. Logging happens in the parent
    only: in the child, a logged report reaches this role and the session's bookkeeping,
    not the reporters (``quiet_logging``), which would print it a second time.
    """

    def __init__(self, channel: Channel, config: pytest.Config) -> None:
        self.channel = channel
        self.config = config
        self.phases = 0  # phases running now: a report made inside one is not the phase's
        self.failed_subtests: dict[Any, int] = {}  # the count of each test, as last seen

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._phase())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._phase())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._phase())

    def _phase(self) -> Generator[None, Any, Any]:
        self.phases += 1
        try:
            return (yield)
        finally:
            self.phases -= 1

    # tryfirst and registered after the tester role: the outermost wrapper, so the report
    # sent is the one the leak checks have finished with
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if not self.phases:
            self.channel.report(item.config, report)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        subtests.mark_counted(self.config, report, self.failed_subtests)
        self.channel.report(self.config, report)

    def quiet_logging(self) -> None:
        """From now on a report logged here reaches this role and the session only."""
        manager = self.config.pluginmanager
        name = "pytest_runtest_logreport"
        keep = (self, manager.get_plugin("session"))
        others = [p for p in manager.get_plugins() if hasattr(p, name) and p not in keep]
        with contextlib.suppress(Exception):  # pluggy without subsets: logged twice, as before
            setattr(manager.hook, name, manager.subset_hook_caller(name, others))

    def pytest_warning_recorded(
        self, warning_message: warnings.WarningMessage, when: str, nodeid: str
    ) -> None:
        if when == "runtest":
            self.channel.warning(warning_message, nodeid)


class SpawnedChildRole(ChildRole):
    def __init__(self, channel: Channel, config: pytest.Config, cmd_fd: int, folder: Path) -> None:
        super().__init__(channel, config)
        self.cmd_fd = cmd_fd
        self.folder = folder

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        self.quiet_logging()
        serve(session, self.channel, self.cmd_fd, self.folder, spawned=True)


def enter(config: pytest.Config, channel: Channel) -> None:
    """Make this freshly forked process a child: drop the parent's roles, take the child's."""
    manager = config.pluginmanager
    for name in (LOOP, COLLECTION, REPORT):
        plugin = manager.get_plugin(name)
        if plugin is not None:
            manager.unregister(plugin)
    role = ChildRole(channel, config)
    manager.register(role, CHILD)
    role.quiet_logging()
    tester = manager.get_plugin(TESTER)
    if tester is not None:
        tester.boundary = True  # a fresh process: caches are cleared before its first test
