"""The child loop: run the items the parent names, send every report back, in batches.

The reports, warnings and end of several tests go out together in one write: one
wake-up of the parent per batch, not per test. A batch is sent when the parent has no
further test waiting in the pipe (the child would wait for it), when it holds ``BATCH``
tests, or when its oldest test ended ``LINGER`` seconds ago (slow tests still show as they
finish). Until it is sent, everything is also in the child's *journal*, a side file
(a file write wakes nobody) with each test's start: a child that dies or hangs loses
nothing, the tests it finished keep their outcomes, the one it was running is named,
and a crash in the call is still told as a failed call (its setup report is there).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, NoReturn

import pytest
from _pytest.runner import runtestprotocol

from ..leaks import processes
from . import wire
from .journal import Journal
from .messages import ChildFailed, Done, Exit, Interrupted, Message, Ready, Run, Started
from .reports import dump_warning, report_frame

BATCH = 64  # tests in one batch at most
LINGER = 0.1  # seconds a finished test's reports may wait for the rest of its batch


def crash_log(folder: Path, pid: int) -> Path:
    return folder / f"child-{pid}.log"


class Channel:
    """What a child sends its parent: batched, and journaled until it is sent."""

    def __init__(self, fd: int, folder: Path, batch: int = BATCH, linger: float = LINGER) -> None:
        self.fd = fd
        self.batch = batch
        self.linger = linger
        self.frames: list[bytes] = []  # not sent yet
        self.unjournaled: list[bytes] = []  # of those, not in the journal yet
        self.tests = 0  # finished tests in ``frames``
        self.oldest = 0.0  # when the first of them finished
        self.journal = Journal(folder)

    def _add(self, message: Message) -> None:
        self._add_frame(wire.frame(message))

    def _add_frame(self, data: bytes) -> None:
        self.frames.append(data)
        self.unjournaled.append(data)

    def _write_journal(self, *extra: bytes) -> None:
        data = b"".join((*self.unjournaled, *extra))
        self.unjournaled = []
        self.journal.append(data)

    def started(self, nodeid: str) -> None:
        """A test begins: the journal says so (the pipe does not: nobody waits for it)."""
        self._write_journal(wire.frame(Started(nodeid, time.monotonic())))

    def report(self, config: pytest.Config, report: pytest.TestReport) -> None:
        self._add_frame(report_frame(config, report))
        if report.when == "setup":
            self._write_journal()

    def warning(self, message: warnings.WarningMessage, nodeid: str) -> None:
        self._add(dump_warning(message, nodeid))

    def done(self, nodeid: str) -> None:
        """A test is over: journal its reports; they go out with their batch."""
        self._add(Done(nodeid))
        self._write_journal()
        if self.tests == 0:
            self.oldest = time.monotonic()
        self.tests += 1

    def due(self) -> bool:
        """Whether the batch is full or has waited long enough."""
        return self.tests >= self.batch or time.monotonic() - self.oldest >= self.linger

    def flush(self, *last: Message) -> None:
        """Send everything not sent yet (and ``last``), then empty the journal."""
        data = b"".join((*self.frames, *(wire.frame(m) for m in last)))
        self.frames, self.unjournaled, self.tests = [], [], 0
        if data:
            wire.write(self.fd, data)
        self.journal.clear()


def serve(
    session: pytest.Session, channel: Channel, cmd_fd: int, folder: Path, spawned: bool = False
) -> NoReturn:
    """Run items until told to stop; the process exits at the end (never returns).

    A spawned child says when it is ready: its start-up is not its first test's time.

    ``pytest.exit`` and ``KeyboardInterrupt`` inside a test end the run as they would under
    plain pytest: the parent is told, and raises them itself.
    """
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    processes.become_subreaper()
    log = open(crash_log(folder, os.getpid()), "w")  # noqa: SIM115 - lives until exit
    faulthandler.enable(file=log, all_threads=False)
    items: dict[str, Any] = {item.nodeid: item for item in session.items}
    reader = wire.Reader(cmd_fd)
    code = 0
    if spawned:
        channel.flush(Ready())
    try:
        while True:
            message = reader.recv()
            if not isinstance(message, Run):
                break
            item = items[message.nodeid]
            nextitem = items.get(message.next or "")
            channel.started(item.nodeid)
            try:
                with _warnings_for(item):
                    runtestprotocol(item, nextitem=nextitem, log=False)
            except pytest.exit.Exception as exc:
                channel.flush(Exit(exc.msg, exc.returncode))
                break
            except KeyboardInterrupt as exc:
                frames = traceback.extract_tb(exc.__traceback__)
                where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
                channel.flush(Interrupted(f"in the child running {item.nodeid}, at {where}"))
                break
            channel.done(item.nodeid)
            if channel.due() or not reader.ready(0):
                channel.flush()  # before waiting for the next command, or the batch is full
    except BaseException:
        code = 3
        text = traceback.format_exc()
        log.write(text)
        with contextlib.suppress(OSError):
            channel.flush(ChildFailed(text))
    finally:
        with contextlib.suppress(Exception):
            processes.end_all()  # nothing a test started outlives its child
            sys.stdout.flush()
            sys.stderr.flush()
            log.flush()
        os._exit(code)


def _warnings_for(item: pytest.Item) -> Any:
    """Apply the configured warning filters to the item, as pytest's own protocol does."""
    try:
        from _pytest.warnings import catch_warnings_for_item
    except ImportError:  # pragma: no cover - older or newer pytest
        return contextlib.nullcontext()
    return catch_warnings_for_item(item.config, ihook=item.ihook, when="runtest", item=item)
