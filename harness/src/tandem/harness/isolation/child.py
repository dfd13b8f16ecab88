"""The child loop: run the items the parent names, send every report back.

A test's reports, its warnings and its end go out together in one write: one wake-up of
the parent per test. So that a crash in the call is still told as a failed call (not a
failed setup), the setup report is also left in a side file the parent reads only when
the child died (``pending_setup``): a file write wakes nobody.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, NoReturn

import pytest
from _pytest.runner import runtestprotocol

from ..leaks import processes
from . import wire
from .messages import ChildFailed, Done, Exit, Interrupted, Message, Ready, Report, Run
from .reports import dump_report, dump_warning


def crash_log(folder: Path, pid: int) -> Path:
    return folder / f"child-{pid}.log"


def _side_file(folder: Path, pid: int) -> Path:
    return folder / f"child-{pid}.setup"


def pending_setup(folder: Path, pid: int) -> Report | None:
    """The setup report a child that died had left in its side file, if any."""
    try:
        message = wire.Reader(os.open(_side_file(folder, pid), os.O_RDONLY))
    except OSError:
        return None
    try:
        found = message.recv()
    except Exception:  # cut off mid-write
        found = None
    finally:
        os.close(message.fd)
    return found if isinstance(found, Report) else None


class Channel:
    """What a child sends its parent, batched per test."""

    def __init__(self, fd: int, folder: Path) -> None:
        self.fd = fd
        self.pending: list[Message] = []
        self.side = os.open(_side_file(folder, os.getpid()), os.O_WRONLY | os.O_CREAT, 0o600)

    def report(self, config: pytest.Config, report: pytest.TestReport) -> None:
        message = dump_report(config, report)
        self.pending.append(message)
        if report.when == "setup":
            wire.send(self.side, message, at=0)

    def warning(self, message: warnings.WarningMessage, nodeid: str) -> None:
        self.pending.append(dump_warning(message, nodeid))

    def flush(self, *last: Message) -> None:
        messages, self.pending = [*self.pending, *last], []
        if messages:
            wire.send(self.fd, *messages)


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
            channel.flush(Done(item.nodeid))
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
