"""What a child that died or was killed had done but not sent, from its pipe and journal.

A child sends its tests' reports in batches and journals them until they are sent
(``child``), so when it ends early the parent gathers both: each test it finished keeps
its own outcome, and the test it was running (the last one started and not finished) is
the one the crash or the timeout is told on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .journal import journal
from .messages import Done, Message, Ready, Started
from .pool import Child


@dataclass(slots=True)
class Leftovers:
    """Per test, the messages not yet handled, in order; the test that was running; the
    failure text for it (set by whoever ended the child)."""

    messages: dict[str, list[Message]] = field(default_factory=dict)
    running: str | None = None
    reason: str = ""

    def holds(self, nodeid: str) -> bool:
        return nodeid in self.messages or nodeid == self.running


def running(folder: Path, pid: int) -> tuple[str | None, float]:
    """The test a live child is running as its journal tells (None between tests), and
    when it started (``time.monotonic()``)."""
    current: tuple[str | None, float] = (None, 0.0)
    for message in journal(folder, pid):
        if isinstance(message, Started):
            current = (message.nodeid, message.at)
        elif isinstance(message, Done) and message.nodeid == current[0]:
            current = (None, 0.0)
    return current


def gather(child: Child, folder: Path, waiting_for: str) -> Leftovers:
    """Everything a child that has ended left: what is still in its pipe, then what its
    journal holds that the pipe did not bring (a batch sent just before the end is in both).

    A message without a test's id (``Exit``) belongs to the test before it; the first ones,
    to ``waiting_for``.
    """
    piped: list[Message] = []
    while child.reader.ready(0):
        message = child.reader.recv()
        if message is None:
            break
        piped.append(message)
    done = child.done | {m.nodeid for m in piped if isinstance(m, Done)}
    journaled = [m for m in journal(folder, child.pid) if getattr(m, "nodeid", None) not in done]
    out = Leftovers()
    started: list[str] = []
    current = waiting_for
    for message in (*piped, *journaled):
        if isinstance(message, Ready):
            continue
        if isinstance(message, Started):
            started.append(message.nodeid)
            current = message.nodeid
            continue
        current = getattr(message, "nodeid", current)
        out.messages.setdefault(current, []).append(message)
        if isinstance(message, Done):
            done.add(message.nodeid)
    out.running = next((n for n in reversed(started) if n not in done), None)
    return out


def overdue(
    child: Child,
    folder: Path,
    waiting_for: str,
    limit: float,
    deadline: float | None,
    timeout: Callable[[Any], float],
) -> str:
    """Why a silent child must be killed now, if it must: the test waited for ran past its
    ``deadline`` (its ``limit``), or (that one's reports not sent yet) a later test of its
    batch ran past its own limit (``timeout`` of its item)."""
    now = time.monotonic()
    nodeid, since = running(folder, child.pid)
    later = child.ahead.get(nodeid or "") if nodeid != waiting_for else None
    if later is not None:
        limit = timeout(later)
        if not limit or now < since + limit:
            return ""
    elif deadline is None or now < deadline:
        return ""
    return (
        f"Timeout: {nodeid or waiting_for} ran longer than {limit:g} s; "
        f"the harness killed its child (pid {child.pid})"
    )
