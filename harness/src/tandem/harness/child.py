"""The child loop: run the items the parent names, stream every report back as it is made."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from . import leak_procs, wire
from .state import STATE


def crash_log(folder: Path, pid: int) -> Path:
    return folder / f"child-{pid}.log"


def serve(session: pytest.Session, cmd_fd: int, res_fd: int, folder: Path) -> None:
    """Run items until told to stop; the process exits at the end (never returns normally).

    ``pytest.exit`` and ``KeyboardInterrupt`` inside a test end the run as they would under
    plain pytest: the parent is told, and raises them itself.
    """
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    leak_procs.become_subreaper()
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
            try:
                with _warnings_for(item):
                    runtestprotocol(item, nextitem=nextitem, log=False)
            except pytest.exit.Exception as exc:
                wire.send(res_fd, {"exit": exc.msg, "returncode": exc.returncode})
                break
            except KeyboardInterrupt as exc:
                frames = traceback.extract_tb(exc.__traceback__)
                where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
                wire.send(res_fd, {"interrupt": f"in the child running {item.nodeid}, at {where}"})
                break
            wire.send(res_fd, {"done": item.nodeid})
    except BaseException:
        code = 3
        text = traceback.format_exc()
        log.write(text)
        with contextlib.suppress(OSError):
            wire.send(res_fd, {"internal": text})
    finally:
        with contextlib.suppress(Exception):
            leak_procs.end_all()  # nothing a test started outlives its child
            sys.stdout.flush()
            sys.stderr.flush()
            log.flush()
        os._exit(code)


def send_report(config: pytest.Config, report: pytest.TestReport) -> None:
    """Stream one report to the parent (called from the makereport hook in a child)."""
    wire.send(STATE.result_fd, {"report": wire.dump_report(config, report)})


def _warnings_for(item: pytest.Item) -> Any:
    """Apply the configured warning filters to the item, as pytest's own protocol does."""
    try:
        from _pytest.warnings import catch_warnings_for_item
    except ImportError:  # pragma: no cover - older or newer pytest
        return contextlib.nullcontext()
    return catch_warnings_for_item(item.config, ihook=item.ihook, when="runtest", item=item)


def send_warning(message: warnings.WarningMessage, nodeid: str) -> None:
    """Stream a warning the item raised to the parent, which records it as its own."""
    category = message.category
    wire.send(
        STATE.result_fd,
        {
            "warning": {
                "message": str(message.message),
                "category": f"{category.__module__}:{category.__qualname__}",
                "filename": message.filename,
                "lineno": message.lineno,
                "nodeid": nodeid,
            }
        },
    )


def load_warning(data: dict[str, Any]) -> warnings.WarningMessage:
    """The ``warnings.WarningMessage`` that ``send_warning`` sent (UserWarning if unknown)."""
    module, _, name = data["category"].partition(":")
    category: Any = sys.modules.get(module)
    for part in name.split("."):
        category = getattr(category, part, None)
    if not (isinstance(category, type) and issubclass(category, Warning)):
        category = UserWarning
    return warnings.WarningMessage(
        category(data["message"]), category, data["filename"], data["lineno"]
    )
