"""What the roles of one pytest process share: the settings and the run's bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ..settings import Settings
from .coverage import Coverage


@dataclass(slots=True)
class RunState:
    """One per ``config`` (``config.stash[RUN]``); every field is named, nothing ad hoc."""

    settings: Settings
    seed: int = 0
    known: tuple[str, ...] = ()  # engines from the entry-point group and `harness_engines`
    seen: set[str] = field(default_factory=set)  # engines named by markers and defaults
    unknown: list[str] = field(default_factory=list)  # "nodeid: name" of undeclared engines
    import_problems: list[str] = field(default_factory=list)  # patches made at import time
    coverage: Coverage = field(default_factory=Coverage)
    polluter: str | None = None


RUN = pytest.StashKey[RunState]()
PRELOAD_PROBLEMS = pytest.StashKey[list[str]]()  # found before configure, by the preload


def run_state(config: pytest.Config) -> RunState:
    return config.stash[RUN]


# the names the roles are registered under (``config.pluginmanager.get_plugin(name)``)
LOOP = "tandem-harness-loop"
COLLECTION = "tandem-harness-collection"
REPORT = "tandem-harness-report"
TESTER = "tandem-harness-tester"
CHILD = "tandem-harness-child"
CONTROLLER = "tandem-harness-controller"
IMPORT_SKIPS = "tandem-harness-import-skips"
SKIP_SUMMARY = "tandem-harness-skip-summary"
