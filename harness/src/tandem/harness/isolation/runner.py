"""The parent's side of isolation: hand items to fresh children, log what comes back.

An item the child never reported as run fails; a crash or a timeout fails the running
item with the signal and the child's last output, and the unit goes on in a new child.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..settings import Settings
from . import wire
from .child import crash_log
from .messages import ChildFailed, Done, Exit, Interrupted, Message, Report, Run, Warned
from .pool import Child, ChildMain, Pool
from .reports import load_report, load_warning

Log = Callable[[pytest.TestReport], None]
PHASES = ("setup", "call", "teardown")


@dataclass(frozen=True)
class Placement:
    """How the pytest face sees an item: its unit (None: not here), engine and time limit."""

    unit: Callable[[pytest.Item], Any]
    engine: Callable[[pytest.Item], str | None]
    timeout: Callable[[pytest.Item], float]


@dataclass(slots=True)
class Outcome:
    reports: list[pytest.TestReport] = field(default_factory=list)
    done: bool = False
    exit: tuple[str, int | None] | None = None  # pytest.exit() in the child: (reason, code)
    interrupted: str = ""  # KeyboardInterrupt in the child: where it was raised


class Driver(Pool):
    """Runs items in the child of their unit; one per pytest (or xdist worker) process."""

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        seed: int,
        child_main: ChildMain,
        placement: Placement,
    ) -> None:
        super().__init__(config, settings, seed, child_main)
        self.placement = placement
        self.child: Child | None = None
        self.spare: Child | None = None  # forked ahead for the next unit, waiting for items

    def finish(self) -> None:
        """Let the live child exit after its last item (its fixtures are torn down).

        Its exit is not waited for here: the zygote reaps it, and a child still alive
        10 s later is killed at the next check.
        """
        child = self.child
        if child is None:
            return
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
        forced = unit is not None
        unit = unit if forced else self.placement.unit(item)
        if self.child is not None and self.child.unit != unit:
            self.finish()
        if self.child is None:
            self.child = self._take_spare(unit) or self._start(unit)
        next_unit = None if nextitem is None or forced else self.placement.unit(nextitem)
        same = nextitem is not None and (forced or next_unit == unit)
        child = self.child
        wire.send(child.cmd_w, Run(item.nodeid, nextitem.nodeid if same else None))
        if not same and next_unit is not None and self.spare is None:
            self.spare = self._start(next_unit)  # forks while the current item runs
        outcome = self._collect(child, item, log, self.placement.timeout(item))
        if outcome.exit is not None or outcome.interrupted:
            self._stop(child)
            self.child = None
            if outcome.interrupted:
                raise KeyboardInterrupt(outcome.interrupted)
            reason, code = outcome.exit  # type: ignore[misc]
            pytest.exit(reason, returncode=code)
        if not same and self.child is child:
            self.finish()
        return outcome

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
        deadline = time.monotonic() + limit if limit else None
        while True:
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            if child.reader.ready(wait):
                message = child.reader.recv()
                if message is not None and self._take(message, item, log, outcome):
                    return outcome
                if message is not None:
                    continue
                end = time.monotonic() + 5  # the pipe closed: the child is ending
                while self._status(child) is None and time.monotonic() < end:
                    time.sleep(0.002)
                if self._status(child) is None:
                    self._kill(child)
            if self._status(child) is not None:
                self._drain(child, item, log, outcome)
                if not outcome.done:
                    self._fail(item, log, outcome, self._crash_text(child, item))
                    self._kill(child)
                    self._drop(child)
                return outcome
            if deadline is not None and time.monotonic() >= deadline:
                self._kill(child)
                text = (
                    f"Timeout: {item.nodeid} ran longer than {limit:g} s; "
                    f"the harness killed its child (pid {child.pid})"
                )
                self._fail(item, log, outcome, text + self._last_output(child))
                self._drop(child)
                return outcome

    def _drain(self, child: Child, item: pytest.Item, log: Log, outcome: Outcome) -> None:
        while not outcome.done and child.reader.ready(0):
            message = child.reader.recv()
            if message is None:
                return
            self._take(message, item, log, outcome)

    def _take(self, message: Message, item: pytest.Item, log: Log, outcome: Outcome) -> bool:
        """Handle one message; True when the item is over."""
        match message:
            case Report():
                report = load_report(self.config, message)
                outcome.reports.append(report)
                log(report)
            case Warned():
                self.config.hook.pytest_warning_recorded.call_historic(
                    kwargs={
                        "warning_message": load_warning(message),
                        "when": "runtest",
                        "nodeid": message.nodeid,
                        "location": None,
                    }
                )
            case Done():
                outcome.done = True
                whens = {r.when: r for r in outcome.reports}
                ran = "call" in whens or ("setup" in whens and not whens["setup"].passed)
                if not ran or "teardown" not in whens:
                    self._fail(
                        item,
                        log,
                        outcome,
                        "proof of execution: the child finished "
                        f"{item.nodeid} without reporting all of its phases",
                    )
                return True
            case Exit(reason, returncode):
                outcome.exit = (reason, returncode)
                outcome.done = True
                return True
            case Interrupted(where):
                outcome.interrupted = where
                outcome.done = True
                return True
            case ChildFailed(text):
                self._fail(item, log, outcome, "tandem-harness child error:\n" + text)
                outcome.done = True
                return True
        return False

    def _crash_text(self, child: Child, item: pytest.Item) -> str:
        code = child.status if child.status is not None else 0
        how = f"exited with code {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how = f"was killed by signal {signal.Signals(-code).name}"
        return (
            f"Crash: the child process (pid {child.pid}) {how} while running "
            f"{item.nodeid}" + self._last_output(child)
        )

    def _last_output(self, child: Child) -> str:
        parts = []
        capman = self.config.pluginmanager.getplugin("capturemanager")
        if capman is not None and child.proc is None:
            with contextlib.suppress(Exception):
                out, err = capman.read_global_capture()
                parts += [("last stdout", out), ("last stderr", err)]
        if child.proc is not None:  # spawned: its output went to its own files
            for name, path in (("last stdout", child.out), ("last stderr", child.err)):
                with contextlib.suppress(OSError, TypeError):
                    parts.append((name, Path(path).read_text(errors="replace")))
        with contextlib.suppress(OSError):
            parts.append(("fault log", crash_log(self.folder, child.pid).read_text()))
        return "".join(f"\n\n--- {name} ---\n{_clip(name, text)}" for name, text in parts if text)

    def _fail(self, item: pytest.Item, log: Log, outcome: Outcome, text: str) -> None:
        whens = {r.when for r in outcome.reports}
        when = next((w for w in PHASES if w not in whens), "teardown")
        props = list(item.user_properties)
        engine = self.placement.engine(item)
        if engine is not None and ("engine", engine) not in props:
            props.append(("engine", engine))
        report = pytest.TestReport(
            item.nodeid,
            item.location,
            {k: 1 for k in item.keywords},
            "failed",
            text,
            when,
            user_properties=props,
        )  # type: ignore[arg-type]
        outcome.reports.append(report)
        log(report)
        if when != "teardown":
            ok = pytest.TestReport(
                item.nodeid,
                item.location,
                {k: 1 for k in item.keywords},
                "passed",
                None,
                "teardown",
                user_properties=props,
            )
            outcome.reports.append(ok)
            log(ok)


def _clip(name: str, text: str, size: int = 3000) -> str:
    """The interesting end of an output: the last lines, or a fault log's newest frames."""
    if len(text) <= size:
        return text
    return text[:size] + "\n..." if name == "fault log" else "...\n" + text[-size:]
