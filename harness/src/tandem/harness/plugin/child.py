"""The role of a child process: every report and warning of its tests goes to the parent.

A forked child was the pytest process a moment ago: ``enter`` drops the roles it no longer
plays (the test loop, collection, reporting) and takes this one. A spawned child is a new
pytest told ``--harness-worker``: ``SpawnedChildRole`` serves tests instead of pytest's
own loop.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..isolation.child import Channel, serve
from .state import CHILD, COLLECTION, LOOP, REPORT, TESTER


class ChildRole:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    # tryfirst and registered after the tester role: the outermost wrapper, so the report
    # sent is the one the leak checks have finished with
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        self.channel.report(item.config, report)
        return report

    def pytest_warning_recorded(
        self, warning_message: warnings.WarningMessage, when: str, nodeid: str
    ) -> None:
        if when == "runtest":
            self.channel.warning(warning_message, nodeid)


class SpawnedChildRole(ChildRole):
    def __init__(self, channel: Channel, cmd_fd: int, folder: Path) -> None:
        super().__init__(channel)
        self.cmd_fd = cmd_fd
        self.folder = folder

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        serve(session, self.channel, self.cmd_fd, self.folder, spawned=True)


def enter(config: pytest.Config, channel: Channel) -> None:
    """Make this freshly forked process a child: drop the parent's roles, take the child's."""
    manager = config.pluginmanager
    for name in (LOOP, COLLECTION, REPORT):
        plugin = manager.get_plugin(name)
        if plugin is not None:
            manager.unregister(plugin)
    manager.register(ChildRole(channel), CHILD)
    tester = manager.get_plugin(TESTER)
    if tester is not None:
        tester.boundary = True  # a fresh process: caches are cleared before its first test
