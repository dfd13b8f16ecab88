"""What the roles of one pytest process share: the settings, the run's bookkeeping and
what the harness installs in the process (``HarnessState``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from ..leaks.imports import OWN
from ..leaks.watcher import ImportWatcher
from ..settings import Settings
from .coverage import Coverage

if TYPE_CHECKING:
    from ..leaks.ops import OpRecorder


class HarnessState:
    """What the harness installs in this process, owned by this object and no module.

    The import watcher (patches made at import time, clean states, hooks run when a
    module is imported) and the op recorder. Made before the first conftest is loaded
    (``harness_state``), registered with pytest as ``STATE``, and taken out of the process
    at ``pytest_unconfigure``: a second pytest run in the same process (pytester's inline
    runs) starts from nothing.
    """

    def __init__(self, namespace: str) -> None:
        self.watcher = ImportWatcher(OWN)
        self.namespace = namespace
        self._ops: OpRecorder | None = None  # made on first use: a run that never asks
        self.preload_problems: list[str] = []  # found before configure, by the preload

    @property
    def ops(self) -> OpRecorder:
        """The op recorder (made, with the leak checks' module, on first use)."""
        if self._ops is None:
            from ..leaks.ops import OpRecorder

            self._ops = OpRecorder(self.namespace)
        return self._ops

    @property
    def op_problems(self) -> list[str]:
        """What the op recorder found at start-up (nothing when no recorder was made)."""
        return list(self._ops.problems) if self._ops is not None else []

    def watch(self, prefixes: tuple[str, ...]) -> None:
        """Watch modules under ``prefixes`` from now on (the finder goes first, once)."""
        if prefixes:
            self.watcher.watch(prefixes)

    def record_ops(self) -> None:
        """Record op registrations from the moment torch is loaded (now, if it is)."""
        if self.namespace:
            self.watcher.on_import("torch", lambda: self.ops.install())

    def pytest_unconfigure(self) -> None:
        self.watcher.uninstall()
        if self._ops is not None:
            self._ops.uninstall()


@dataclass(slots=True)
class RunState:
    """One per ``config`` (``config.stash[RUN]``); every field is named, nothing ad hoc."""

    settings: Settings
    harness: HarnessState
    seed: int = 0
    known: tuple[str, ...] = ()  # engines from the entry-point group and `harness_engines`
    seen: set[str] = field(default_factory=set)  # engines named by markers and defaults
    unknown: list[str] = field(default_factory=list)  # "nodeid: name" of undeclared engines
    import_problems: list[str] = field(default_factory=list)  # patches made at import time
    coverage: Coverage = field(default_factory=Coverage)
    polluter: str | None = None


RUN = pytest.StashKey[RunState]()
HARNESS = pytest.StashKey[HarnessState]()


def run_state(config: pytest.Config) -> RunState:
    return config.stash[RUN]


def harness_state(config: pytest.Config, namespace: str) -> HarnessState:
    """The process's ``HarnessState`` of this run: made and registered on first use."""
    state = config.stash.get(HARNESS, None)
    if state is None:
        state = config.stash[HARNESS] = HarnessState(namespace)
        config.pluginmanager.register(state, STATE)
    return state


# the names the roles are registered under (``config.pluginmanager.get_plugin(name)``)
STATE = "tandem-harness-state"
LOOP = "tandem-harness-loop"
COLLECTION = "tandem-harness-collection"
REPORT = "tandem-harness-report"
TESTER = "tandem-harness-tester"
CHILD = "tandem-harness-child"
CONTROLLER = "tandem-harness-controller"
IMPORT_SKIPS = "tandem-harness-import-skips"
SKIP_SUMMARY = "tandem-harness-skip-summary"
