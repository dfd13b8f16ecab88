"""Per-process state of the harness (the parent, the zygote and each child have their own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .options import Settings

if TYPE_CHECKING:
    import pytest

    from .checks import Snap
    from .coverage import Coverage


@dataclass(slots=True)
class State:
    """What one process of the harness knows; every field is named, nothing is stashed ad hoc."""

    settings: Settings = field(default_factory=Settings)
    active: bool = False  # the project configured the harness, passed a flag or marked engines
    in_child: bool = False
    result_fd: int = -1
    boundary: bool = True  # caches are cleared before the next test
    last_engine: str | None = None
    seed: int = 0
    known: tuple[str, ...] = ()  # engines from the entry-point group and `harness_engines`
    seen: set[str] = field(default_factory=set)  # engines named by markers and defaults
    unknown: list[str] = field(default_factory=list)  # "nodeid: name" of undeclared engines
    session: pytest.Session | None = None
    coverage: Coverage | None = None
    polluter: str | None = None
    current: Snap | None = None  # the snapshot of the test being run in this process
    current_test: str = ""
    fixture_leaks: list[str] = field(default_factory=list)  # wider fixtures' leaks, not yet told
    import_problems: list[str] = field(default_factory=list)  # patches made at import time


STATE = State()
