"""Test counts read from pytest's closing line, summed over the jobs of a run.

pytest ends with a line such as ``==== 3 failed, 40 passed, 2 skipped in 9.1s ====``; the
runner keeps each job's last such line so the run can close with one total.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CLOSING = re.compile(r"^=+ (?P<body>.*\d+ \w+.*) in [\d.]+s(?: \([^)]*\))? =+$")
_PART = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|warnings?|deselected)")

KINDS = ("passed", "failed", "skipped", "xfailed", "xpassed", "error", "deselected")


def parse_closing(line: str) -> dict[str, int] | None:
    """The counts in a pytest closing line, or None when the line is not one."""
    match = _CLOSING.match(line.strip())
    if match is None:
        return None
    counts: dict[str, int] = {}
    for number, kind in _PART.findall(match["body"]):
        kind = "error" if kind.startswith("error") else kind
        if kind.startswith("warning"):
            continue
        counts[kind] = counts.get(kind, 0) + int(number)
    return counts


def total(per_job: Iterable[dict[str, int]]) -> dict[str, int]:
    summed = dict.fromkeys(KINDS, 0)
    for counts in per_job:
        for kind, n in counts.items():
            summed[kind] = summed.get(kind, 0) + n
    return summed


def closing_line(summed: dict[str, int]) -> str:
    """``tests: N passed, N failed, N skipped`` (errors count as failures)."""
    failed = summed.get("failed", 0) + summed.get("error", 0)
    passed, skipped = summed.get("passed", 0), summed.get("skipped", 0)
    return f"tests: {passed} passed, {failed} failed, {skipped} skipped"
