"""The engine coverage table: per engine, how the tests that declare engines ended."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

COLUMNS = ("passed", "failed", "xfailed", "xpassed", "skipped", "not_covered")


@dataclass(slots=True)
class Row:
    passed: int = 0
    failed: int = 0
    xfailed: int = 0
    xpassed: int = 0  # a declared gap that passed: the declaration is stale
    skipped: int = 0
    not_covered: int = 0


@dataclass(slots=True)
class Coverage:
    """Fed with every logged report; knows each base test's engines and outcomes."""

    outcomes: dict[tuple[str, str], str] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)

    def add(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        for key, value in report.user_properties:
            if key == "harness_leak" and report.when == "teardown":
                self.leaks.append(f"{report.nodeid}: {value}")
        engine = props.get("engine")
        if not isinstance(engine, str):
            return
        base = _base(report.nodeid, engine)
        key = (base, engine)
        outcome = _outcome(report)
        if outcome is None:
            return
        previous = self.outcomes.get(key)
        if previous in (None, "passed") or outcome == "failed":
            self.outcomes[key] = outcome

    def rows(self) -> dict[str, Row]:
        engines = sorted({engine for _, engine in self.outcomes})
        bases = {base for base, _ in self.outcomes}
        rows = {engine: Row() for engine in engines}
        for (_, engine), outcome in self.outcomes.items():
            row = rows[engine]
            setattr(row, outcome, getattr(row, outcome) + 1)
        for engine, row in rows.items():
            row.not_covered = sum(1 for base in bases if (base, engine) not in self.outcomes)
        return rows

    def table(self) -> list[str]:
        rows = self.rows()
        if not rows:
            return []
        width = max(len("engine"), *(len(e) for e in rows))
        head = "engine".ljust(width) + "".join(f"{c.replace('_', ' '):>13}" for c in COLUMNS)
        lines = [head]
        for engine, row in rows.items():
            values = asdict(row)
            lines.append(engine.ljust(width) + "".join(f"{values[c]:>13}" for c in COLUMNS))
        return lines

    def write(self, path: str) -> None:
        data: dict[str, Any] = {
            "engines": {e: asdict(r) for e, r in self.rows().items()},
            "tests": [
                {"test": b, "engine": e, "outcome": o}
                for (b, e), o in sorted(self.outcomes.items())
            ],
        }
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=2) + "\n")


def _base(nodeid: str, engine: str) -> str:
    if not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    head, _, ids = nodeid[:-1].rpartition("[")
    parts = [p for p in ids.split("-") if p != engine]
    return f"{head}[{'-'.join(parts)}]" if parts else head


def _outcome(report: pytest.TestReport) -> str | None:
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            if report.skipped:
                return "xfailed"
            return "xpassed" if report.passed else report.outcome
        return report.outcome
    if report.when == "teardown" and report.failed:
        return "failed"
    return None
