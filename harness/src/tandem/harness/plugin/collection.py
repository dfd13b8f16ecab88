"""The role of a process that collects tests: checks, selection and order.

At the end of collection: unknown engines are usage errors, op conflicts and patches made
at import time end the run (under xdist, as a collection error the controller prints),
``--engines`` deselects, and tests are grouped so each isolation unit's tests run together.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

import pytest

from ..leaks import imports
from .loop import unit_of
from .markers import engine_of
from .state import RunState

PATCHED = (
    "tandem-harness: attributes of watched modules were patched at import time "
    "(every test would run with the swap):"
)


class CollectionRole:
    def __init__(self, run: RunState, in_worker: bool) -> None:
        self.run = run
        self.in_worker = in_worker  # an xdist worker: the controller tells the user

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        """Watch the import of each test module for patches it makes to watched modules."""
        if not isinstance(collector, pytest.Module):
            return (yield)
        problems = self.run.import_problems
        with imports.watch(self.run.harness.watcher, collector.nodeid, problems):
            return (yield)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        run, settings = self.run, self.run.settings
        known = run.known or tuple(sorted(run.seen))
        if run.unknown:
            raise pytest.UsageError(
                f"unknown engine in @pytest.mark.engines: {', '.join(run.unknown)}; "
                f"known engines: {', '.join(known) or '(none)'}"
            )
        bad = [name for name in settings.selected if name not in known]
        if bad:
            raise pytest.UsageError(
                f"--engines: unknown engine(s) {', '.join(bad)}; "
                f"known engines: {', '.join(known) or '(none)'}"
            )
        conflicts = run.harness.op_problems
        if conflicts:
            self._end(
                session, items, "tandem-harness: custom op conflicts:\n" + "\n".join(conflicts)
            )
            return
        run.import_problems += [
            f"{change} (after its import, before any test ran)"
            for change in imports.since_import(run.harness.watcher)
            if not any(p.startswith(change) for p in run.import_problems)
        ]
        if run.import_problems:
            lines = "\n".join(f"  - {p}" for p in run.import_problems)
            self._end(session, items, f"{PATCHED}\n{lines}")
            return
        if settings.selected:
            keep = [i for i in items if engine_of(i) in (None, *settings.selected)]
            dropped = [i for i in items if engine_of(i) not in (None, *settings.selected)]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = keep
        if settings.isolation != "none":
            first: dict[Any, int] = {}
            keys = [first.setdefault(repr(unit_of(i, settings)), len(first)) for i in items]
            order = sorted(range(len(items)), key=keys.__getitem__)
            items[:] = [items[i] for i in order]

    def _end(self, session: pytest.Session, items: list[pytest.Item], text: str) -> None:
        """End the run before its first test, saying why.

        An xdist worker cannot end the run itself (the controller would only see a worker
        that collected nothing): it reports a failed collection, which the controller
        prints and which fails the run, and it runs no test.
        """
        if not self.in_worker:
            pytest.exit(text, returncode=1)
        text = re.sub(r" at 0x[0-9a-f]+>", ">", text)  # the same text from every worker: told once
        report = pytest.CollectReport("", "failed", text, [])
        session.config.hook.pytest_collectreport(report=report)
        items.clear()
