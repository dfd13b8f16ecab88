"""``--harness-fail-import-skips``: a test skipped because an import failed is an error.

A suite that skips what it cannot import reports green on a machine that lacks a
dependency: in CI, where every dependency should be installed, such a skip hides a test
that never runs. With the option (or ``harness_fail_import_skips = true``) a skip raised
by ``pytest.importorskip``, or raised while an ``ImportError`` was being handled, fails
its test (or its module's collection) naming the module. Other skips stay skips: one for
missing hardware (its reason names a GPU or CUDA) or a missing tool is counted apart in
the summary. Modules listed in ``harness_allowed_import_skips`` may still be skipped for
(those that cannot be installed on the machine, such as a CUDA-only package).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest

# pytest.importorskip's message: "could not import 'name': No module named 'name'"
_IMPORTORSKIP = re.compile(r"could not import '([^']+)'")
_HARDWARE = re.compile(r"\b(gpu|gpus|cuda|rocm|xpu|mps|accelerator)\b", re.IGNORECASE)
MARK = "harness_import_skip"  # the user property of a skip turned into an error


def missing_module(exc: BaseException) -> str | None:
    """The module whose import failed, if ``exc`` (a skip) was caused by a failed import."""
    found = _IMPORTORSKIP.search(str(getattr(exc, "msg", "") or exc))
    if found:
        return found.group(1)
    seen: set[int] = set()
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ImportError):
            return cause.name or str(cause)
        cause = cause.__cause__ or cause.__context__
    return None


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def kind(reason: str) -> str:
    """How a skip's reason reads: ``import``, ``hardware`` or ``other``."""
    if _IMPORTORSKIP.search(reason):
        return "import"
    if _HARDWARE.search(reason):
        return "hardware"
    return "other"


class ImportSkipRole:
    """Turns import skips into failures in the process that runs (or collects) a test."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed

    def _allowed(self, module: str) -> bool:
        return any(module == name or module.startswith(name + ".") for name in self.allowed)

    def _text(self, where: str, module: str, reason: str) -> str:
        return (
            f"{where} was skipped because {module!r} cannot be imported ({reason}); with "
            "harness_fail_import_skips a missing import is an error: install it (the dev "
            "requirements), or list it in harness_allowed_import_skips if it cannot be"
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        excinfo = call.excinfo
        if not report.skipped or excinfo is None or hasattr(report, "wasxfail"):
            return report
        module = missing_module(excinfo.value)
        reason = _reason(report)
        if module is None or self._allowed(module) or kind(reason) == "hardware":
            return report
        report.outcome = "failed"
        report.longrepr = self._text(item.nodeid, module, reason)
        report.user_properties.append((MARK, module))
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        """A module-level ``pytest.importorskip``: the module's collection fails instead."""
        report = yield
        if report.outcome != "skipped":
            return report
        reason = _reason(report)
        found = _IMPORTORSKIP.search(reason)
        if found and not self._allowed(found.group(1)) and kind(reason) != "hardware":
            report.outcome = "failed"
            report.longrepr = self._text(collector.nodeid, found.group(1), reason)
        return report


class SkipSummary:
    """In the process that talks to the user: the skips that stayed skips, by kind."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.hardware: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = _reason(report)
            self.kinds[kind(reason)] += 1
            if kind(reason) == "hardware":
                self.hardware[reason] += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.kinds:
            return
        terminalreporter.write_sep("=", "skips (harness_fail_import_skips)")
        hardware, other = self.kinds["hardware"], self.kinds["other"]
        terminalreporter.write_line(
            f"{hardware} for missing hardware (GPU/CUDA), {other} for other reasons "
            f"(a missing tool, a condition), {self.kinds['import']} for an allowed missing import"
        )
        for reason, count in self.hardware.most_common():
            terminalreporter.write_line(f"  {count} x {reason}")
