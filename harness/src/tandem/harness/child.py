"""The child loop: run the items the parent names, stream every report back as it is made."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from . import wire
from .state import STATE


def crash_log(folder: Path, pid: int) -> Path:
    return folder / f"child-{pid}.log"


def serve(session: pytest.Session, cmd_fd: int, res_fd: int, folder: Path) -> None:
    """Run items until told to stop; the process exits at the end (never returns normally)."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    STATE.in_child = True
    STATE.result_fd = res_fd
    STATE.boundary = True
    log = open(crash_log(folder, os.getpid()), "w")  # noqa: SIM115 - lives until exit
    faulthandler.enable(file=log, all_threads=False)
    items: dict[str, Any] = {item.nodeid: item for item in session.items}
    code = 0
    try:
        while True:
            message = wire.recv(cmd_fd)
            if message is None or message.get("stop"):
                break
            item = items[message["run"]]
            nextitem = items.get(message.get("next") or "")
            wire.send(res_fd, {"start": item.nodeid})
            runtestprotocol(item, nextitem=nextitem, log=False)
            wire.send(res_fd, {"done": item.nodeid})
    except BaseException:
        code = 3
        text = traceback.format_exc()
        log.write(text)
        with contextlib.suppress(OSError):
            wire.send(res_fd, {"internal": text})
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
            log.flush()
        os._exit(code)


def send_report(config: pytest.Config, report: pytest.TestReport) -> None:
    """Stream one report to the parent (called from the makereport hook in a child)."""
    wire.send(STATE.result_fd, {"report": wire.dump_report(config, report)})
