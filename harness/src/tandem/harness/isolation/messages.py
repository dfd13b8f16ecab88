"""The messages on the pipes between the parent, the zygote and the children.

Each is a small frozen dataclass; ``wire`` frames and pickles them (all three processes
run the same interpreter and the same harness). A receiver matches on the type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


# parent -> child
@dataclass(frozen=True)
class Run:
    """Run one test; ``next`` is the next test in this child (None: tear everything down)."""

    nodeid: str
    next: str | None


@dataclass(frozen=True)
class Stop:
    """Exit after the last test (its fixtures are torn down already)."""


# child -> parent
@dataclass(frozen=True)
class Ready:
    """A spawned child has collected and waits for tests: its tests' clocks start now."""


@dataclass(frozen=True)
class Report:
    """One phase's report: the ``TestReport`` itself (``whole``: its class and state, or
    the report where its class pickles its own way), or (when it cannot be pickled) what
    ``pytest_report_to_serializable`` made of it (``data``)."""

    nodeid: str
    whole: Any = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class Warned:
    """A warning a test raised; the parent records it as its own."""

    message: str
    category: str  # "module:qualname"
    filename: str
    lineno: int
    nodeid: str


@dataclass(frozen=True)
class Started:
    """A test began (``at``: ``time.monotonic()``); written only to the child's journal, so
    the parent can tell which test a child that died or hung was running, and since when."""

    nodeid: str
    at: float


@dataclass(frozen=True)
class Done:
    """The test ran to its end (every phase reported)."""

    nodeid: str


@dataclass(frozen=True)
class Exit:
    """``pytest.exit()`` in a test: the parent ends the run the same way."""

    reason: str
    returncode: int | None


@dataclass(frozen=True)
class Interrupted:
    """``KeyboardInterrupt`` in a test: ``where`` it was raised."""

    where: str


@dataclass(frozen=True)
class ChildFailed:
    """The child's own loop failed (a harness bug): its traceback."""

    traceback: str


# zygote -> parent
@dataclass(frozen=True)
class Forked:
    pid: int


@dataclass(frozen=True)
class Exited:
    pid: int
    status: int  # as os.waitpid returned it


@dataclass(frozen=True)
class ForkRefused:
    """The zygote may not fork (CUDA was initialised): why."""

    reason: str


ToChild = Run | Stop
FromChild = Ready | Report | Warned | Started | Done | Exit | Interrupted | ChildFailed
FromZygote = Forked | Exited | ForkRefused
Message = ToChild | FromChild | FromZygote

# by name, as ``wire`` sends them
KINDS: dict[str, type[Message]] = {
    kind.__name__: kind
    for kind in (
        Run,
        Stop,
        Ready,
        Report,
        Warned,
        Started,
        Done,
        Exit,
        Interrupted,
        ChildFailed,
        Forked,
        Exited,
        ForkRefused,
    )
}
