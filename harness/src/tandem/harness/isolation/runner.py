"""The parent's side of isolation: hand items to fresh children, log what comes back.

An item the child never reported as run fails; a crash or a timeout fails the running
item with the signal and the child's last output, the items it had finished keep their
outcomes (``leftovers``), and the unit goes on in a new child.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ..settings import Settings
from . import wire
from .failures import Log, Outcome, crash_text, fail, last_output
from .intake import settle, take
from .leftovers import Leftovers, gather, overdue
from .messages import Done, Message, Ready, Run
from .pool import Child, ChildMain, Pool

START_UP = 120.0  # seconds a spawned child may take to start and collect
AHEAD = 64  # commands sent ahead of the running one, so that the child batches its reports
LOOK = 0.25  # seconds between looks at a silent child's journal


@dataclass(frozen=True)
class Placement:
    """How the pytest face sees an item: its unit (None: not here), engine, time limit, and
    the item pytest runs after a given one (None: the last, or no look-ahead)."""

    unit: Callable[[pytest.Item], Any]
    engine: Callable[[pytest.Item], str | None]
    timeout: Callable[[pytest.Item], float]
    following: Callable[[pytest.Item], pytest.Item | None]


class Driver(Pool):
    """Runs items in the child of their unit; one per pytest (or xdist worker) process.

    With ``ahead``, the next items of the same unit (up to ``AHEAD``) are sent while the
    current one runs, so the child goes on the moment one is done instead of waiting for
    the parent to log the reports (the two overlap), and sends its reports in batches.
    Only a run that may stop early (``-x``) must not do this: the child would run tests
    pytest never reports.
    """

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        seed: int,
        child_main: ChildMain,
        placement: Placement,
        ahead: bool = True,
    ) -> None:
        super().__init__(config, settings, seed, child_main)
        self.placement = placement
        self.ahead = ahead
        self.child: Child | None = None
        self.spare: Child | None = None  # forked ahead for the next unit, waiting for items
        self.leftovers: Leftovers | None = None  # of the last child that ended early

    def finish(self) -> None:
        """Let the live child exit after its last item (its fixtures are torn down).

        Its exit is not waited for here: the zygote reaps it, and a child still alive
        10 s later is killed at the next check. A child that still holds tests sent ahead
        (the loop stopped, or went elsewhere) is killed now: no test pytest did not ask
        for may run.
        """
        child = self.child
        if child is None:
            return
        if child.queued:
            self._kill(child)
        self._stop(child)
        self.child = None
        self._sweep()

    def shutdown(self, interrupted: bool = False) -> None:
        """Stop every child (killing them at once after an interrupt) and the zygote."""
        if interrupted:
            for child in (self.child, self.spare):
                if child is not None:
                    self._kill(child)
        self.finish()
        if self.spare is not None:
            self._stop(self.spare)
            self.spare = None
        self.close_all()

    def run(
        self, item: pytest.Item, nextitem: pytest.Item | None, log: Log, unit: Any = None
    ) -> Outcome:
        """Run one item in the child of its unit, logging reports through ``log``.

        ``unit`` forces the unit (and makes ``nextitem`` part of it), as the polluter hunt does.
        """
        if self.leftovers is not None:
            if self.leftovers.holds(item.nodeid):
                return settle(self._replay(item, log, Outcome()))
            self.leftovers = None
        forced = unit is not None
        unit = unit if forced else self.placement.unit(item)
        next_unit = None if nextitem is None or forced else self.placement.unit(nextitem)
        same = nextitem is not None and (forced or next_unit == unit)
        command = Run(item.nodeid, nextitem.nodeid if same and nextitem else None)
        queued = self.child.queued[0] if self.child is not None and self.child.queued else None
        if self.child is not None and (self.child.unit != unit or queued not in (None, command)):
            self.finish()  # another unit, or the loop did not go where the look-ahead guessed
        if self.child is None:
            self.child = self._take_spare(unit) or self._start(unit)
        child = self.child
        if child.queued:
            child.queued.pop(0)
        else:
            wire.send(child.cmd_w, command)
            child.last = item
        if same and self.ahead and not forced:
            assert nextitem is not None
            self._send_ahead(child, nextitem, unit)
        if not same and next_unit is not None and self.spare is None:
            self.spare = self._start(next_unit)  # forks while the current item runs
        outcome = self._collect(child, item, log, self.placement.timeout(item))
        if (outcome.exit is not None or outcome.interrupted) and self.child is child:
            self._stop(child)
            self.child = None
        if not same and self.child is child:
            self.finish()
        return settle(outcome)

    def _send_ahead(self, child: Child, nextitem: pytest.Item, unit: Any) -> None:
        """Keep up to ``AHEAD`` commands of this unit queued in the child, in the loop's order.

        Topped up once half of them have run: one write for many tests, not one per test.
        """
        if len(child.queued) > AHEAD // 2:
            return
        runs = []
        candidate = nextitem if not child.queued else self.placement.following(child.last)
        while candidate is not None and len(child.queued) < AHEAD:
            if self.placement.unit(candidate) != unit:
                break
            after = self.placement.following(candidate)
            same = after is not None and self.placement.unit(after) == unit
            run = Run(candidate.nodeid, after.nodeid if same and after else None)
            child.queued.append(run)
            child.ahead[candidate.nodeid] = candidate
            child.last = candidate
            runs.append(run)
            candidate = after if same else None
        if runs:
            wire.send(child.cmd_w, *runs)

    def kill_all(self) -> None:
        """Kill every child and the zygote at once (the pytest process is being terminated)."""
        for child in (self.child, self.spare, *(c for c, _ in self.ending)):
            if child is not None:
                self._kill(child)
        if self.zygote is not None:
            self.zygote.kill()

    def _drop(self, child: Child) -> None:
        self._close(child)
        if self.child is child:
            self.child = None

    def _take_spare(self, unit: Any) -> Child | None:
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        if spare.unit == unit and self._status(spare) is None:
            return spare
        self._stop(spare)
        return None

    def _collect(self, child: Child, item: pytest.Item, log: Log, limit: float) -> Outcome:
        outcome = Outcome()
        # a spawned child still starting gets a start-up allowance before the test's own
        deadline = time.monotonic() + limit + (0 if child.ready else START_UP) if limit else None
        look = time.monotonic() + LOOK  # when to look for a later test of the batch that hangs
        while True:
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            if child.reader.ready(wait):
                message = child.reader.recv()
                if isinstance(message, Ready):
                    child.ready = True
                    deadline = time.monotonic() + limit if limit else None
                    continue
                if message is not None and self._take(message, item, log, outcome):
                    if isinstance(message, Done):
                        child.done.add(message.nodeid)
                    return outcome
                if message is not None:
                    continue
                end = time.monotonic() + 5  # the pipe closed: the child is ending
                while self._status(child) is None and time.monotonic() < end:
                    time.sleep(0.002)
                if self._status(child) is None:
                    self._kill(child)
            if self._status(child) is not None:
                return self._ended_early(child, item, log, outcome, "")
            now = time.monotonic()
            if now >= look or (deadline is not None and now >= deadline):
                look = now + LOOK
                timeout = self.placement.timeout
                text = overdue(child, self.folder, item.nodeid, limit, deadline, timeout)
                if text:
                    return self._ended_early(child, item, log, outcome, text)

    def _ended_early(
        self, child: Child, item: pytest.Item, log: Log, outcome: Outcome, text: str
    ) -> Outcome:
        """The child died (``text`` empty) or was killed for a timeout (``text`` says so):
        what it finished keeps its outcome, the test it was running fails with ``text``."""
        self._kill(child)  # its process group: what it started goes with it
        end = time.monotonic() + 5  # dead, so that nothing it writes comes after the gathering
        while self._status(child) is None and time.monotonic() < end:
            time.sleep(0.002)
        left = self.leftovers = gather(child, self.folder, item.nodeid)
        culprit = left.running or item.nodeid
        left.reason = (text or crash_text(child, culprit, "")) + self._last_output(child)
        self._drop(child)
        return self._replay(item, log, outcome)

    def _replay(self, item: pytest.Item, log: Log, outcome: Outcome) -> Outcome:
        """Log what a child that ended early left for ``item``; fail it if it had not ended."""
        assert self.leftovers is not None
        for message in self.leftovers.messages.pop(item.nodeid, []):
            if self._take(message, item, log, outcome):
                break
        if not outcome.done:
            self._fail(item, log, outcome, self.leftovers.reason)
            self.leftovers.running = None  # told; the next test runs in a new child
        return outcome

    def _take(self, message: Message, item: pytest.Item, log: Log, outcome: Outcome) -> bool:
        """Handle one message; True when the item is over."""
        return take(
            self.config,
            message,
            item,
            log,
            outcome,
            lambda text: self._fail(item, log, outcome, text),
        )

    def _last_output(self, child: Child) -> str:
        return last_output(self.config, child, self.folder)

    def _fail(self, item: pytest.Item, log: Log, outcome: Outcome, text: str) -> None:
        fail(item, self.placement.engine(item), log, outcome, text)
