"""pytest's ``subtests`` fixture fails a test whose subtest failed through a count kept in
the process that ran it; the test's report is then logged in the parent, which keeps its
own count. The child marks each subtest report its run counted, and the parent counts it
again as it logs it. A pytest without subtests (or with another count) is left as it is.
"""

from __future__ import annotations

from typing import Any

import pytest

MARK = "harness_counted_failure"  # on a subtest report that the child's count took in


def _counts(config: pytest.Config) -> Any:
    try:
        from _pytest.subtests import failed_subtests_key
    except ImportError:  # a pytest without built-in subtests
        return None
    return config.stash.get(failed_subtests_key, None)


def _key(report: pytest.TestReport) -> Any:
    return getattr(report, "id", report.nodeid)  # the count's key: ``id`` where reports have one


def mark_counted(config: pytest.Config, report: pytest.TestReport, seen: dict[Any, int]) -> None:
    """In the child, as a report is logged: mark it when the count of its test went up."""
    counts = _counts(config) if report.failed else None
    if counts is None:
        return
    key = _key(report)
    now = counts.get(key, 0)
    if now > seen.get(key, 0):
        setattr(report, MARK, True)
    seen[key] = now


def count(config: pytest.Config, report: pytest.TestReport) -> None:
    """In the parent, before a report is logged: a marked one counts here too."""
    if not getattr(report, MARK, False):
        return
    counts = _counts(config)
    if counts is not None:
        counts[_key(report)] += 1
