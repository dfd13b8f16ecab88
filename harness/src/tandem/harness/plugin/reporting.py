"""The role of the process that talks to the user: header, coverage table, JSON report.

Registered in the process whose terminal is shown: the xdist controller, or pytest itself
when it runs without xdist. Every logged report feeds the coverage table.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import seeds
from .state import RunState


class ReportRole:
    def __init__(self, run: RunState) -> None:
        self.run = run

    def pytest_report_header(self, config: pytest.Config) -> str:
        s = self.run.settings
        engines = ",".join(s.selected) or "all"
        timeout = f"{s.timeout:g}s" if s.timeout else "none"
        return (
            f"tandem-harness: isolation={s.isolation} start={s.start_method} leaks={s.leaks} "
            f"timeout={timeout} seed={self.run.seed} ({seeds.SOURCES[s.seed_source]}) "
            f"engines={engines}"
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.run.coverage.add(report)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        cov = self.run.coverage
        lines = cov.table()
        if lines:
            terminalreporter.write_sep("=", "engine coverage")
            for line in lines:
                terminalreporter.write_line(line)
        if cov.leaks:
            terminalreporter.write_sep("=", "harness leaks (warn)")
            for line in cov.leaks:
                terminalreporter.write_line(line)
        if self.run.settings.find_polluter:
            terminalreporter.write_sep("=", f"polluter: {self.run.polluter or 'not found'}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.run.settings.engine_report:
            self.run.coverage.write(self.run.settings.engine_report)


class ControllerRole:
    """The xdist controller's own duty: every worker gets the controller's seed."""

    def __init__(self, run: RunState) -> None:
        self.run = run

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["harness_seed"] = self.run.seed
